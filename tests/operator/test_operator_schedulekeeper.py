"""A DelaySchedule's round (``schedulekeeper.keep``) against a real ``delayq
serve``: the first round creates the schedule, the next makes no call (the spec
read back over the wire is the declared one, every field set, so the rounds of
an unchanged resource never move its next firing), ``suspend`` pauses and
resumes it, a spec change updates it, a schedule deleted by other means is made
again, and ``held`` is what the shard answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import delayq
from delayq_operator.schedulekeeper import keep
from delayq_operator.scheduleplan import Call
from delayq_operator.schedules import DeclaredSchedule, parse_schedule
from delayq_operator.topicaddress import Target
from tests.support.servers import ServerProcess

FULL = {
    "topicRef": {"name": "orders"},
    "topic": "reports",
    "cron": "0  2 * *  MON-FRI",
    "timeZone": "Europe/London",
    "start": "2026-03-01T00:00:00Z",
    "end": "2099-12-31T23:00:00+01:00",
    "jitter": "30s",
    "catchUp": {"policy": "all", "window": "2d"},
    "message": {"body": '{"report": "daily"}', "headers": {"content-type": "application/json"}},
}


def declared(**spec: Any) -> DeclaredSchedule:
    return parse_schedule({"metadata": {"name": "nightly"}, "spec": {**FULL, **spec}})


def test_a_round_makes_the_shard_hold_the_resource_and_nothing_more(
    start_server: Callable[..., ServerProcess],
) -> None:
    srv = start_server()
    at = Target(srv.address, None)

    calls, held = keep(at, declared())
    assert calls == [Call.CREATE]
    assert held.spec == declared().spec and not held.paused and held.next_fire_ms > 0
    first = held
    assert keep(at, declared()) == ([], first)  # (nothing called: the next time kept)

    calls, held = keep(at, declared(suspend=True))
    assert (calls, held.paused) == ([Call.PAUSE], True)
    assert keep(at, declared(suspend=True))[0] == []

    calls, held = keep(at, declared(cron="30 6 * * *"))
    assert calls == [Call.UPDATE, Call.RESUME]
    assert (held.spec.cron, held.paused) == ("30 6 * * *", False)

    with delayq.Client(srv.address) as c:
        c.delete_schedule("nightly")
        calls, held = keep(at, declared(suspend=True))  # made paused, in one call
        assert (calls, held.paused, held.next_fire_ms) == ([Call.CREATE], True, 0)
        c.delete_schedule("nightly")
        calls, held = keep(at, declared())
        assert calls == [Call.CREATE]
        stored = c.get_schedule("nightly")
    assert (stored.spec, stored.id, stored.next_fire_ms) == (
        declared().spec,
        held.id,
        held.next_fire_ms,
    )
