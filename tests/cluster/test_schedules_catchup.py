"""Catch-up of recurring schedules after the shard was down, for each policy: a
real ``delayq serve``, schedules firing every second, the process SIGKILLed and
started again on its data directory ``DOWN_S`` seconds later. A consumer receives
the firings before and after (``tests.support.firings``).

The nominal times surely missed are those after the kill plus the lead the firer
writes ahead (its lead, ``lead_of(name)``: none of them was written before the
process died) and
before the restart (all of them passed before it could fire): ``missed``. A
firing the catch-up wrote is due when it was written, after its nominal time; one
written ahead is due at its nominal time: so the consumer tells them apart.

- ``none``: none of the missed fired; no firing was caught up;
- ``latest``: exactly one was caught up (the latest missed), the others skipped;
- ``all`` (a 1 h window): every missed one fired, caught up, in order; none skipped;
- ``all`` with a window of half the downtime less the longest lead: those older
  than the window before the restart were skipped, at least one within it was
  caught up.

For each, the nominal times that never fired form one run, as long as the
schedule's ``missed`` count (none for ``all``); every firing came under one id,
none early. And a paused schedule fires nothing until resumed, then every second
again (its pause counted missed under ``none``).

Downtime: ``DELAYQ_SCHEDULE_DOWN_S`` (30 s; 60 s with ``--long``), longer than any
schedule's lead (``MAX_LEAD_MS``, 20 s), so each has nominal times missed."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from delayq import CatchUp, Client, MessageTemplate, ScheduleSpec
from delayq.recurrence import MAX_LEAD_MS, lead_of
from tests.support.firings import Firing, FiringCounter, check_once, gaps
from tests.support.servers import ServerProcess
from tests.support.sizes import size

pytestmark = pytest.mark.timeout(300)

DOWN_S = size("DELAYQ_SCHEDULE_DOWN_S", ci=30, long=60)  # > the longest lead (20 s)
TOPIC = "ticks"
EVERY_MS = 1_000

POLICIES = {
    "none": (CatchUp.NONE, 3_600_000),
    "latest": (CatchUp.LATEST, 3_600_000),
    "all": (CatchUp.ALL, 3_600_000),
    # half of what is surely missed (the downtime less the longest lead)
    "all-window": (CatchUp.ALL, (DOWN_S * 1000 - MAX_LEAD_MS) // 2),
}

Start = Callable[..., ServerProcess]


def _spec(catch_up: CatchUp, window_ms: int, start_ms: int) -> ScheduleSpec:
    return ScheduleSpec(
        template=MessageTemplate(topic=TOPIC),
        every_ms=EVERY_MS,
        start_ms=start_ms,
        catch_up=catch_up,
        catch_up_window_ms=window_ms,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


def _wait_firing(counter: FiringCounter, names: list[str], after_ms: int) -> None:
    """Until each of ``names`` fired a nominal time past ``after_ms``."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and counter.failure is None:
        got = counter.nominal()
        if all(max(got.get(n, {0})) > after_ms for n in names):
            return
        time.sleep(0.2)
    raise AssertionError(f"not every schedule fired past {after_ms}: {counter.nominal()}")


def _caught_up(firings: list[Firing]) -> list[int]:
    """The nominal times fired by a catch-up (due after their nominal time: no jitter)."""
    return sorted({f.nominal_ms for f in firings if f.deliver_at_ms > f.nominal_ms})


def test_each_catch_up_policy_after_the_shard_was_down(start_server: Start) -> None:
    first = start_server()
    names = list(POLICIES)
    start = (_now_ms() // 1000 + 2) * 1000
    with Client(first.address, timeout_s=30) as client:
        for name, (policy, window) in POLICIES.items():
            client.create_schedule(name, _spec(policy, window, start))
    with FiringCounter(first.address, TOPIC) as before:
        _wait_firing(before, names, start + 2 * EVERY_MS)
    first.stop(signal.SIGKILL)
    killed = _now_ms()
    time.sleep(DOWN_S)
    restarted = _now_ms()
    second = start_server(data_dir=first.data_dir)
    with FiringCounter(second.address, TOPIC) as after:
        _wait_firing(after, names, restarted + 3 * EVERY_MS)
        with Client(second.address, timeout_s=30) as client:
            states = {n: client.get_schedule(n) for n in names}
            for n in names:  # its firings written ahead are cancelled with it
                client.delete_schedule(n)
        after.wait_quiet()
    assert before.failure is None and after.failure is None, (before.failure, after.failure)

    for name in names:
        missed = {t for t in range(start, restarted, EVERY_MS) if killed + lead_of(name) < t}
        assert len(missed) >= DOWN_S - MAX_LEAD_MS // 1000 - 2, "the downtime spans nominal times"
        firings = [f for f in before.firings() + after.firings() if f.name == name]
        fired = {f.nominal_ms for f in firings}
        check_once(firings, {name: fired})
        caught = _caught_up(firings)
        holes = gaps(fired, EVERY_MS)
        print(f"{name}: {len(fired)} fired, caught up {len(caught)}, gaps {holes}, {states[name]}")
        assert sum(n for _, n in holes) == states[name].missed, (name, holes, states[name])
        assert len(holes) <= 1, (name, holes)
        if name == "none":
            assert not fired & missed and not caught, (name, sorted(fired & missed), caught)
        elif name == "latest":
            assert len(caught) == 1 and caught[0] >= max(missed), (name, caught)
            assert caught[0] + EVERY_MS in fired, "the next ones fire on time"
            assert len(fired & missed) <= 1
        elif name == "all":
            assert missed <= fired and set(caught) >= missed, (name, sorted(missed - fired))
            assert not holes and states[name].missed == 0
        else:  # all, within half the downtime
            window = POLICIES[name][1]
            assert not {t for t in fired & missed if t < restarted - window}, "outside the window"
            assert 1 <= len(caught) <= window // EVERY_MS + 1, (name, caught)
            assert holes, "the older missed ones were skipped"


def test_a_paused_schedule_fires_nothing_until_resumed(start_server: Start) -> None:
    server = start_server()
    start = (_now_ms() // 1000 + 2) * 1000
    with (
        Client(server.address, timeout_s=30) as client,
        FiringCounter(server.address, TOPIC) as counter,
    ):
        client.create_schedule("paused", _spec(CatchUp.NONE, 3_600_000, start))
        _wait_firing(counter, ["paused"], start + EVERY_MS)
        held = client.pause_schedule("paused")
        paused_at = _now_ms()
        assert held.paused and client.next_firings("paused", count=3) == []
        time.sleep(4)
        resumed_at = _now_ms()
        client.resume_schedule("paused")
        _wait_firing(counter, ["paused"], resumed_at + 2 * EVERY_MS)
        state = client.get_schedule("paused")
        client.delete_schedule("paused")
        counter.wait_quiet()
    assert counter.failure is None, counter.failure
    fired = {f.nominal_ms for f in counter.firings()}
    check_once(counter.firings(), {"paused": fired})
    during = {t for t in fired if paused_at < t < resumed_at}
    assert not during, f"fired while paused: {sorted(during)}"
    [(_, skipped)] = gaps(fired, EVERY_MS)
    # the gap: those missed while paused (counted), and the firings the pause
    # cancelled, written ahead of it (within the lead: fired, not missed)
    ahead = lead_of("paused") // EVERY_MS + 1
    assert skipped >= 3 and state.missed <= skipped <= state.missed + ahead, (skipped, state)
