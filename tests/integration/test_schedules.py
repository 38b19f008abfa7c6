"""Recurring schedules on a local cluster of three shards (real processes): an
every-second schedule fires into its topic, each nominal time once, with the
headers naming it, received through the client's fan-in; pause, resume, update
and delete reach the name's shard wherever the client was pointed; a list pages
through the schedules of every shard, each name once in order; a call about a
name at another shard is refused WRONG SHARD naming the owner (raw stubs), and
hostile inputs INVALID_ARGUMENT naming the field; a preview of a spec is answered
by any node; a call about a name a finishing rebalance moves waits for the map
(here: for the hold to lapse), as a call by key does, not refused UNAVAILABLE;
a replica refuses the writes FAILED_PRECONDITION, and a client given it reaches
the master."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import delayq
from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.errors import WrongShard
from delayq.shardmap import key_shards
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.cluster import LocalCluster

SHARDS = 3
TOPIC = "cron-out"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("schedules") / "c", shards=SHARDS) as c:
        c.wait_serving()
        yield c


def spec(topic: str = TOPIC, **over: object) -> delayq.ScheduleSpec:
    template = delayq.MessageTemplate(topic=topic, body=b"beat", headers={"from": "cron"})
    return delayq.ScheduleSpec(template=template, **over)  # type: ignore[arg-type]


def stub(cluster: LocalCluster, shard: int) -> pb_grpc.DelayQueueStub:
    return pb_grpc.DelayQueueStub(grpc.insecure_channel(cluster.address(shard)))


def test_firings_come_once_each_with_their_headers(cluster: LocalCluster) -> None:
    with delayq.Client(cluster.address(0)) as c:
        c.create_schedule("heartbeat", spec(every_ms=1000))
        times: list[int] = []
        until = time.monotonic() + 30
        while len(times) < 4 and time.monotonic() < until:
            got = c.receive(TOPIC, "ops", max_messages=50, wait_s=1.0)
            for m in got:
                assert (m.key, m.body, m.headers["from"]) == ("heartbeat", b"beat", "cron")
                assert m.headers["delayq-schedule"] == "heartbeat"
                t = int(m.headers["delayq-schedule-time"])
                assert m.delivered_at_ms >= t
                times.append(t)
            if got:
                c.ack(TOPIC, "ops", [m.receipt for m in got])
        assert len(times) >= 4 and len(set(times)) == len(times), times
        assert sorted(times) == list(range(min(times), max(times) + 1, 1000)), "none skipped"

        paused = c.pause_schedule("heartbeat")
        assert paused.paused and c.next_firings("heartbeat") == []
        assert not c.resume_schedule("heartbeat").paused
        updated = c.update_schedule("heartbeat", spec(every_ms=3_600_000))
        assert updated.spec.every_ms == 3_600_000 and updated.fired == paused.fired
        c.delete_schedule("heartbeat")
        with pytest.raises(delayq.NotFound):
            c.get_schedule("heartbeat")


def test_a_list_pages_through_every_shard_once(cluster: LocalCluster) -> None:
    names = [f"job-{i:03d}" for i in range(30)]
    assert set(key_shards(names, SHARDS).tolist()) == set(range(SHARDS)), "on every shard"
    with delayq.Client(cluster.address(1)) as c:
        for n in names:
            c.create_schedule(n, spec(cron="0 3 * * *", time_zone="Europe/London"))
        seen: list[str] = []
        token = ""
        pages = 0
        while True:
            page = c.list_schedules(page_size=4, page_token=token)
            assert len(page.schedules) <= 4
            seen += [s.name for s in page.schedules if s.name.startswith("job-")]
            pages += 1
            token = page.next_page_token
            if not token:
                break
        assert seen == names and pages >= 8
        assert [s.name for s in c.list_schedules(page_size=1000).schedules] == names
        for n in names:
            c.delete_schedule(n)
        assert c.list_schedules().schedules == ()


def test_another_shard_refuses_a_name_naming_its_owner(cluster: LocalCluster) -> None:
    name = "owned-elsewhere"
    owner = int(key_shards([name], SHARDS)[0])
    other = (owner + 1) % SHARDS
    with delayq.Client(cluster.address(other)) as c:  # the client routes: no refusal
        c.create_schedule(name, spec(every_ms=60_000))
    with pytest.raises(grpc.RpcError) as err:
        stub(cluster, other).GetSchedule(pb.ScheduleName(name=name), timeout=10)
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert (WrongShard.OWNER_KEY, str(owner)) in tuple(err.value.trailing_metadata() or ())
    assert err.value.details().startswith("name:")
    got = stub(cluster, owner).GetSchedule(pb.ScheduleName(name=name), timeout=10)
    assert got.name == name and got.spec.every_ms == 60_000
    # a shard lists its own schedules only
    listed = stub(cluster, other).ListSchedules(pb.ListSchedulesRequest(), timeout=10)
    assert name not in [s.name for s in listed.schedules]
    with delayq.Client(cluster.address(0)) as c:
        c.delete_schedule(name)


def _good() -> pb.ScheduleSpec:
    return pb.ScheduleSpec(every_ms=60_000, template=pb.MessageTemplate(topic="t"))


def _with(**change: object) -> pb.ScheduleSpec:
    p = _good()
    for k, v in change.items():
        setattr(p, k, v)
    return p


def _template(**change: object) -> pb.ScheduleSpec:
    p = _good()
    p.template.CopyFrom(pb.MessageTemplate(**change))  # type: ignore[arg-type]
    return p


def _create(spec: pb.ScheduleSpec | None = None, name: str = "x") -> pb.CreateScheduleRequest:
    return pb.CreateScheduleRequest(name=name, spec=_good() if spec is None else spec)


def _preview(spec: pb.ScheduleSpec, count: int = 0) -> pb.NextFiringsRequest:
    return pb.NextFiringsRequest(spec=spec, count=count)


CREATE = "CreateSchedule"
BIG_BODY = b"x" * (65 << 10)


@pytest.mark.parametrize(
    ("method", "request_", "field"),
    [
        (CREATE, _create(name="x" * 129), "name"),
        (CREATE, _create(name="-x"), "name"),
        (CREATE, _create(_with(catch_up=9)), "spec.catch_up"),
        (CREATE, _create(_with(cron="* * *")), "spec"),
        (CREATE, _create(_with(every_ms=-5)), "spec.every_ms"),
        (CREATE, _create(_with(time_zone="../etc/passwd")), "spec.time_zone"),
        (CREATE, _create(_with(end_ms=2**62)), "spec.end_ms"),
        (CREATE, _create(_template(topic="t", body=BIG_BODY)), "spec.template.body"),
        (CREATE, _create(_template(topic="t", headers={"delayq-x": "1"})), "spec.template.headers"),
        (CREATE, pb.CreateScheduleRequest(name="x"), "spec"),
        ("ListSchedules", pb.ListSchedulesRequest(page_size=5000), "page_size"),
        ("ListSchedules", pb.ListSchedulesRequest(page_token="\x00"), "page_token"),
        ("NextFirings", _preview(_good(), count=1001), "count"),
        ("NextFirings", _preview(_with(cron="0 0 31 2 *", every_ms=0)), "spec.cron"),
        ("NextFirings", pb.NextFiringsRequest(), "name"),
        ("GetSchedule", pb.ScheduleName(name=""), "name"),
    ],
)
def test_hostile_inputs_are_refused_naming_the_field(
    cluster: LocalCluster, method: str, request_: object, field: str
) -> None:
    for shard in range(SHARDS):  # every shard: inputs are checked before the name's owner
        with pytest.raises(grpc.RpcError) as err:
            getattr(stub(cluster, shard), method)(request_, timeout=10)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert err.value.details().startswith(f"{field}"), err.value.details()


def test_any_node_previews_a_spec(cluster: LocalCluster) -> None:
    nightly = _with(cron="30 2 * * *", every_ms=0, time_zone="America/New_York")
    request = _preview(nightly, count=400)
    answers = [stub(cluster, s).NextFirings(request, timeout=10).times_ms for s in range(SHARDS)]
    assert len(answers[0]) == 400
    # the day of the spring-forward fires once, at 03:00 EDT (02:30 does not exist)
    days = sorted({t // 86_400_000 for t in answers[0]})
    assert len(days) == 400 and days[-1] - days[0] == 399, "one a day: none twice, none skipped"
    for a in answers[1:]:  # (a firing time may pass between two calls: compare the overlap)
        assert set(a[1:399]) <= set(answers[0])


def test_a_name_held_by_a_finishing_rebalance_waits_for_the_map(cluster: LocalCluster) -> None:
    # a name shard 0 owns now that a rebalance to 4 shards would give shard 3
    name = next(
        n
        for n in (f"held-{i}" for i in range(1000))
        if key_shards([n], SHARDS)[0] == 0 and key_shards([n], SHARDS + 1)[0] == SHARDS
    )
    with delayq.Client(cluster.address(0)) as c:
        c.create_schedule(name, spec(every_ms=3_600_000))
    epoch = cluster.current_map().topology_epoch
    with grpc.insecure_channel(cluster.admin_address(0)) as ch:
        held = apb.PrepareRequest(owners=SHARDS + 1, topology_epoch=epoch, hold_ms=1500, job="t")
        arpc.ShardAdminStub(ch).Prepare(held, timeout=10)
    # held: the call waits (no map switch comes: the hold lapses), then shard 0 answers
    got = stub(cluster, 0).GetSchedule(pb.ScheduleName(name=name), timeout=8)
    assert got.name == name
    with delayq.Client(cluster.address(0)) as c:
        c.delete_schedule(name)


def test_a_replica_refuses_the_writes_and_the_client_finds_the_master(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", shards=1, replicas=2) as c:
        c.wait_serving()
        master = c.address(0)
        replica = next(a for a in (c.node_address(0, n) for n in range(2)) if a != master)
        with grpc.insecure_channel(replica) as ch, pytest.raises(grpc.RpcError) as err:
            pb_grpc.DelayQueueStub(ch).CreateSchedule(
                pb.CreateScheduleRequest(name="r", spec=_good()), timeout=10
            )
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        with delayq.Client(replica) as client:  # given the replica: routed to the master
            made = client.create_schedule("r", spec(every_ms=60_000))
            assert client.get_schedule("r") == made
