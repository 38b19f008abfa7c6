"""Recurring schedules through replication (in process, a fake clock, the
replication tests' pair of engines): a replica keeps the plans as pending
messages and fires nothing; promoted, it goes on firing each nominal time once;
and when its copy of the log ends between a step's firings and the plan's next
copy (an asynchronous replica's last chunk), the old plan fires again on it
and finds those firings by their dedup ids."""

from __future__ import annotations

from pathlib import Path

from delayq import FakeClock
from delayq.ids import MessageId
from delayq.recurrence.spec import CatchUp
from tests.replication.test_replica_engine import open_pair, replicate
from tests.support.engines import START_MS, drain, run_until
from tests.support.schedules import by_schedule, every, fired_times

SECOND = 1000


def test_a_promoted_replica_goes_on_firing_each_nominal_time_once(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    master, replica = open_pair(tmp_path, clock)
    try:
        names = [f"s{i}" for i in range(10)]
        for name in names:
            master.create_schedule(name, every(2 * SECOND))
        got = []
        for _ in range(12):  # 12 s, replicated as it goes (as sync replication is)
            run_until(master, clock, clock.now_ms() + 1000, step_ms=50)
            got += drain(master)
            replicate(master, replica)
            replica.pump()
        assert replica.observing.counters["schedule_firings"] == 0  # a replica fires nothing
        assert len(replica.list_schedules(limit=100).schedules) == 10
        master.close()
        replica.replicating.promote(2)
        run_until(replica, clock, START_MS + 30 * SECOND + 1, step_ms=50)
        got += drain(replica)
        want = [START_MS + k * 2 * SECOND for k in range(1, 16)]
        assert by_schedule(got) == {name: want for name in names}
        assert replica.observing.counters["early"] == 0
    finally:
        master.close()
        replica.close()


def test_a_replica_with_the_firings_but_not_the_plan_s_copy_fires_none_twice(
    tmp_path: Path,
) -> None:
    clock = FakeClock(START_MS)
    master, replica = open_pair(tmp_path, clock)
    try:
        master.create_schedule("tick", every(10 * SECOND, catch_up=CatchUp.ALL))
        replicate(master, replica)
        run_until(master, clock, START_MS + 9500, step_ms=50)  # 10 s written, and the copy
        copy = MessageId.parse(master.get_schedule("tick").id, "id").position
        while replica.commitlog_end < copy:  # the replica's log ends just before the copy
            start, data = master.replicating.read_log(
                replica.commitlog_end, copy - replica.commitlog_end
            )
            replica.replicating.apply_replicated(start, data, master.replicating.epochs)
        assert replica.commitlog_end == copy
        master.close()
        replica.replicating.promote(2)
        assert replica.get_schedule("tick").state.fired == 0  # the old plan
        assert [r.deliver_at_ms for r in replica.lookup_key("t", "tick")] == [START_MS + 10_000]
        run_until(replica, clock, START_MS + 20 * SECOND + 1, step_ms=50)
        assert fired_times(drain(replica)) == [START_MS + 10 * SECOND, START_MS + 20 * SECOND]
        assert replica.get_schedule("tick").state.fired == 2
    finally:
        master.close()
        replica.close()
