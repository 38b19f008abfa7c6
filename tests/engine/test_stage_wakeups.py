"""Which stage wakes which, on the real clock with the engine's own threads: the
scan stage steps when its next slot is due or, held back by a full release
buffer, when release made room; never once per release step (each wake-up is a
GIL hand-off in the middle of a paced delivery), and never in a spin."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from delayq import Engine, ScheduleBatch, SystemClock

from ..conftest import small_settings


def _counting_scan(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the scan stage's steps (patched before ``start``, which binds it)."""
    calls = [0]
    step = engine._scan_step

    def counted() -> bool:
        calls[0] += 1
        return step()

    monkeypatch.setattr(engine, "_scan_step", counted)
    return calls


def _schedule(engine: Engine, dues: list[int]) -> None:
    engine.schedule_batch(ScheduleBatch(topic="t", bodies=[b"x"] * len(dues), deliver_at_ms=dues))


def _deliver_all(engine: Engine, n: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while engine.counters["delivered"] < n:
        assert time.monotonic() < deadline, f"delivered {engine.counters['delivered']} of {n}"
        time.sleep(0.005)


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
        assert engine.counters["early"] == 0
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
    release = engine._release_step

    def counted_release() -> bool:
        did = release()
        releases[0] += did
        return did

    monkeypatch.setattr(engine, "_release_step", counted_release)
    engine.start()
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.001):
            peak[0] = max(peak[0], engine.gauges()["release_buffer"])

    sampler = threading.Thread(target=sample)
    try:
        p = engine.settings.precision_ms
        first = (time.time_ns() // 1_000_000 // p + 5) * p
        # every slot holds per_slot messages, 2 ms apart: two slots never fit at once
        dues = [first + s * p + 2 * i for s in range(slots) for i in range(per_slot)]
        _schedule(engine, dues)
        sampler.start()
        _deliver_all(engine, len(dues))
        assert engine.counters["early"] == 0
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
