"""Which stage wakes which, on the real clock with the engine's own threads: the
scan stage steps when its next slot is due or, held back by a full release
buffer, when release made room; never once per release step (each wake-up is a
GIL hand-off in the middle of a paced delivery), and never in a spin."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from delayq import Engine, FakeClock, SystemClock
from delayq.clock import precise_waits, timer_slack_ns
from delayq.engine import CancelOutcome, ScheduleBatch
from delayq.timers.stages.release import Releaser
from delayq.timers.stages.scan import Scanner
from tests.support.engines import small_settings


def _counting_scan(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the scan stage's steps (patched before ``start``, which binds it)."""
    calls = [0]
    step = Scanner.step

    def counted(self: Scanner) -> bool:
        calls[0] += 1
        return step(self)

    monkeypatch.setattr(Scanner, "step", counted)
    return calls


def _schedule(engine: Engine, dues: list[int]) -> None:
    engine.schedule_batch(ScheduleBatch(topic="t", bodies=[b"x"] * len(dues), deliver_at_ms=dues))


def _deliver_all(engine: Engine, n: int, timeout_s: float = 20.0) -> None:
    _wait_for(
        lambda: engine.observing.counters["delivered"] >= n,
        timeout_s,
        lambda: f"delivered {engine.observing.counters['delivered']} of {n}",
    )


def test_a_paced_release_does_not_wake_the_scan_per_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(small_settings(tmp_path / "data"), SystemClock())
    scans = _counting_scan(engine, monkeypatch)
    engine.start()
    try:
        p = engine.settings.precision_ms
        # 60 messages, each in a ms of its own, inside one slot well ahead
        first = (time.time_ns() // 1_000_000 // p + 4) * p + 5
        _schedule(engine, [first + 1 + i for i in range(60)])
        _deliver_all(engine, 60)
        assert engine.observing.counters["early"] == 0
    finally:
        engine.close()
    # the scan stepped for the slots it passed (a handful in the test's half second),
    # not once for each of the 60 release steps (one per message: each has its own ms)
    assert scans[0] < 40, scans[0]


def test_a_full_release_buffer_holds_the_scan_back_until_release_makes_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit, per_slot, slots = 50, 40, 4
    engine = Engine(small_settings(tmp_path / "data", release_buffer_messages=limit), SystemClock())
    scans = _counting_scan(engine, monkeypatch)
    releases = [0]
    release = Releaser.step

    def counted_release(self: Releaser) -> bool:
        did = release(self)
        releases[0] += did
        return did

    monkeypatch.setattr(Releaser, "step", counted_release)
    engine.start()
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.001):
            peak[0] = max(peak[0], engine.observing.gauges()["release_buffer"])

    sampler = threading.Thread(target=sample)
    try:
        p = engine.settings.precision_ms
        first = (time.time_ns() // 1_000_000 // p + 5) * p
        # every slot holds per_slot messages, 2 ms apart: two slots never fit at once
        dues = [first + s * p + 2 * i for s in range(slots) for i in range(per_slot)]
        _schedule(engine, dues)
        sampler.start()
        _deliver_all(engine, len(dues))
        assert engine.observing.counters["early"] == 0
        assert engine.stats("t")[0].delivered == len(dues)
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join()
        engine.close()
    assert peak[0] <= limit, "the scan fired a slot into a full release buffer"
    # held back, the scan slept until a release step woke it: no spin (a spin steps
    # thousands of times over the ~0.4 s the slots take to release)
    assert scans[0] <= releases[0] + 100, (scans[0], releases[0])


def test_a_held_back_scan_fires_once_release_drops_what_was_cancelled(
    tmp_path: Path,
) -> None:
    """Room made by a release step that delivers nothing (every message it took was
    cancelled while it waited) wakes the held-back scan too: the next slot fires
    on time, not after the scan's idle timeout (1 s)."""
    clock = FakeClock()
    engine = Engine(small_settings(tmp_path / "data", release_buffer_messages=50), clock)
    engine.start()
    try:
        p, lead = engine.settings.precision_ms, engine.settings.scan_lead_ms
        slot = clock.now_ms() // p + 5
        first = [slot * p + 2 * i for i in range(40)]  # two slots that never fit at once
        second = [(slot + 1) * p + 2 * i for i in range(40)]
        out = engine.schedule_batch(
            ScheduleBatch(topic="t", bodies=[b"x"] * 80, deliver_at_ms=first + second)
        )
        _wait_for(lambda: engine.observing.gauges()["enqueue_queue"] == 0)
        clock.set(slot * p - lead)  # the first slot fires
        _wait_for(lambda: engine.observing.gauges()["release_buffer"] == 40)
        assert set(engine.cancel(out.ids[:40])) == {CancelOutcome.CANCELLED}
        clock.set((slot + 1) * p - lead)  # the second is due to fire: no room yet
        _wait_for(lambda: engine.inspect().wakeups.scan_blocked)
        clock.set((slot + 2) * p)  # release takes the cancelled ones (room), then the rest
        # well inside the scan's 1 s idle timeout: only a wake-up can have fired it
        _wait_for(lambda: engine.observing.counters["delivered"] == 40, timeout_s=0.5)
    finally:
        engine.close()


def _wait_for(
    done: Callable[[], bool], timeout_s: float = 10.0, what: Callable[[], str] = lambda: ""
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout_s} s {what()}"
        time.sleep(0.002)


T = TypeVar("T")
linux_only = pytest.mark.skipif(
    timer_slack_ns() is None, reason="timer slack is a Linux thread property"
)


def _in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` run in a new thread (which inherits the caller's timer slack)."""
    got: list[T] = []
    t = threading.Thread(target=lambda: got.append(fn()))
    t.start()
    t.join()
    return got[0]


@linux_only
def test_precise_waits_tightens_only_the_calling_thread_and_what_it_starts() -> None:
    before = timer_slack_ns()

    def tighten() -> tuple[bool, int | None, int | None]:
        took = precise_waits(2_000)
        return took, timer_slack_ns(), _in_thread(timer_slack_ns)

    assert _in_thread(tighten) == (True, 2_000, 2_000)  # its own, and inherited
    assert timer_slack_ns() == before  # the caller of that thread is untouched
    with pytest.raises(ValueError, match="slack_ns"):
        precise_waits(0)


def _thread_slack(t: threading.Thread) -> int:
    return int(Path(f"/proc/{t.native_id}/timerslack_ns").read_text())


@linux_only
def test_the_release_stage_waits_with_a_tight_timer_slack(tmp_path: Path) -> None:
    """The release stage's wake-ups are messages' due times: its thread runs with
    a 1 µs timer slack, not the kernel's default (50 µs); the other stages keep it."""
    engine = Engine(small_settings(tmp_path / "data"), SystemClock()).start()
    try:
        stages = {t.name: t for t in engine.inspect().threads}
        release = stages["delayq-release"]
        deadline = time.monotonic() + 5  # the stage sets it as its thread starts
        while _thread_slack(release) != 1_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _thread_slack(release) == 1_000
        assert _thread_slack(stages["delayq-enqueue"]) == timer_slack_ns() != 1_000
    finally:
        engine.close()
