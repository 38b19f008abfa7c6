"""Shard nodes as real processes: replicas hold the master's log byte for byte
(every id resolves on every node), refuse writes naming the master, sync acks
wait for the in-sync set, a master's lease and fences stop it, epochs are
enforced, and an old master back with an unreplicated tail is cut back."""

from __future__ import annotations

import signal
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from delayq.admin.v1 import admin_pb2 as apb
from delayq.client import Client
from delayq.formats import receiptkey
from delayq.ids import MessageId
from delayq.replication.followers import SILENT_S
from delayq.v1 import delayq_pb2 as pb
from tests.replication.nodes import (
    admin,
    caught_up,
    node,
    nodes,
    public,
    schedule,
    status,
    wait_for,
)
from tests.support.servers import ServerProcess


def scrape(p: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://{p.metrics_address()}/metrics", timeout=5) as r:
        return str(r.read().decode())


def test_replicas_hold_the_masters_log_and_refuse_writes(tmp_path: Path) -> None:
    m = node(tmp_path, "m")
    r1 = node(tmp_path, "r1", follow=m.admin_address)
    r2 = node(tmp_path, "r2", follow=m.admin_address)
    with nodes(m, r1, r2):
        ids = schedule(m.address, *(b"body%d" % i for i in range(300)))
        ids += schedule(m.address, b"soon", delay_ms=100)
        wait_for("replicas", caught_up(m.admin_address, r1.admin_address, r2.admin_address))
        for r in (r1, r2):
            stub = public(r.address)
            for i in (0, 150, 299):
                assert stub.Lookup(pb.LookupRequest(id=ids[i])).body == b"body%d" % i
            st = status(r.admin_address)
            assert (st.role, st.epoch, st.master, st.streaming) == (
                "replica",
                1,
                m.admin_address,
                True,
            )
            with pytest.raises(grpc.RpcError) as err:
                schedule(r.address, b"x")
            assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert f"the master is {m.address}" in err.value.details()
        # the delivery of "soon" reaches the replicas as the master's DELIVER record
        wait_for(
            "the delivered state at the replicas",
            lambda: all(
                public(r.address).Lookup(pb.LookupRequest(id=ids[-1])).state
                == pb.MESSAGE_STATE_DELIVERED
                for r in (r1, r2)
            ),
        )
        ms = status(m.admin_address)
        assert {r.name for r in ms.replicas if r.connected} == {"r1", "r2"}
        wait_for("lag 0", lambda: 'delayq_replication_lag_bytes{replica="r2"} 0.0' in scrape(m))
        master_metrics, replica_metrics = scrape(m), scrape(r1)
        for line in (
            'delayq_role{role="master"} 1.0',
            "delayq_insync_members 3.0",
            'delayq_replica_connected{replica="r1"} 1.0',
            "delayq_epoch 1.0",
            "delayq_delivering 1.0",
        ):
            assert line in master_metrics
        for line in ('delayq_role{role="replica"} 1.0', "delayq_replica_streaming 1.0"):
            assert line in replica_metrics
        # a client given a replica's address writes to the master
        with Client(r1.address) as c:
            assert c.schedule("t", b"via replica", delay=60).ok


def test_sync_acks_wait_for_the_insync_set(tmp_path: Path) -> None:
    args = ("--replication", "sync", "--min-insync", "2", "--replication-timeout", "500ms")
    m = node(tmp_path, "m", *args)
    r = node(tmp_path, "r", *args, follow=m.admin_address)
    with nodes(m, r):
        wait_for("the replica", lambda: status(m.admin_address).insync == ["m", "r"])
        acked = schedule(m.address, b"acked", delay_ms=0)
        # the mark first: the log grows on (the message is due at once), and the
        # replica's fsynced end read before the master's mark may trail a later mark
        high_water = status(m.admin_address).high_water
        assert status(r.admin_address).flushed >= high_water > 0
        r.stop(signal.SIGKILL)
        with pytest.raises(grpc.RpcError) as err:
            schedule(m.address, b"unacked", delay_ms=0)
        assert err.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "did not confirm" in err.value.details() or "in-sync" in err.value.details()
        # a hand-out is a write too (its attempt is logged): refused the same way
        time.sleep(0.5)
        with pytest.raises(grpc.RpcError) as err:
            public(m.address).Receive(
                pb.ReceiveRequest(topic="t", group="g", max_messages=10, wait_ms=300)
            )
        assert err.value.code() is grpc.StatusCode.UNAVAILABLE
        assert acked
        r2 = node(tmp_path, "r", *args, follow=m.admin_address)  # back on its data: catches up
        with nodes(r2):
            wait_for("the replica back", caught_up(m.admin_address, r2.admin_address))
            assert schedule(m.address, b"again", delay_ms=0)
            got = public(m.address).Receive(
                pb.ReceiveRequest(topic="t", group="g2", max_messages=10, wait_ms=2000)
            )
            assert {x.body for x in got.messages} >= {b"acked", b"unacked"}


def test_a_write_to_an_idle_sync_shard_reaches_its_replica(tmp_path: Path) -> None:
    """The stream waits for the log to grow (no polling): a write after a quiet
    spell is streamed, the replica acknowledges it, and it holds the record."""
    args = ("--replication", "sync", "--min-insync", "2")
    m = node(tmp_path, "m", *args)
    r = node(tmp_path, "r", *args, follow=m.admin_address)
    with nodes(m, r):
        wait_for("the replica", lambda: status(m.admin_address).insync == ["m", "r"])
        for body in (b"after a quiet spell", b"and another"):
            time.sleep(1)  # idle: the stream waits on the log (a state, not a race)
            (i,) = schedule(m.address, body)  # acked: the replica holds it fsynced
            assert status(r.admin_address).flushed >= status(m.admin_address).high_water
            assert public(r.address).Lookup(pb.LookupRequest(id=i)).body == body


def test_a_lapsed_lease_or_a_fence_stops_the_master(tmp_path: Path) -> None:
    m = node(tmp_path, "m")
    with nodes(m):
        # started as master, no lease: the first probe with one bounds it from its arrival
        assert not status(m.admin_address).leased
        status(m.admin_address, epoch=1, lease_ms=800, insync=["m"])
        schedule(m.address, b"in lease")
        # (a probe without an epoch renews nothing; the lapse to the ms: test_lease)
        wait_for("the lease to lapse", lambda: not status(m.admin_address).lease_valid)
        st = status(m.admin_address)
        assert (st.role, st.lease_valid) == ("master", False)
        with pytest.raises(grpc.RpcError) as err:
            schedule(m.address, b"late", delay_ms=0)
        assert err.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "lost its lease" in err.value.details()
        token = st.lease_token
        for _ in range(2):  # a probe of a later epoch renews no lease (it is stale)
            later = status(m.admin_address, epoch=2, lease_ms=60_000, insync=["m"],
                           lease_token=token)  # fmt: skip
            assert not later.lease_valid
        # a grant counts from the answer its token names: one that arrives after that
        # answer's time plus the lease share (a late probe) grants nothing
        time.sleep(0.4)  # past the 375 ms a 500 ms lease holds (a bound, not a race)
        late = status(m.admin_address, epoch=1, lease_ms=500, insync=["m"], lease_token=token)
        assert late.leased and not late.lease_valid
        # a token it never gave (another process's, made up) grants nothing either
        made_up = status(m.admin_address, epoch=1, lease_ms=60_000, lease_token=token ^ 1 << 40)
        assert not made_up.lease_valid
        renewed = status(m.admin_address, epoch=1, lease_ms=60_000, insync=["m"],
                         lease_token=late.lease_token)  # fmt: skip
        assert renewed.lease_valid
        schedule(m.address, b"renewed")
        # fences: a stale epoch is refused; the current one sticks
        with pytest.raises(grpc.RpcError) as err:
            admin(m.admin_address).Fence(apb.FenceRequest(epoch=0))
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert admin(m.admin_address).Fence(apb.FenceRequest(epoch=1)).fenced
        with pytest.raises(grpc.RpcError) as err:
            schedule(m.address, b"fenced")
        assert "fenced" in err.value.details()
        status(m.admin_address, epoch=1, lease_ms=60_000, insync=["m"])  # a renewal lifts no fence
        assert status(m.admin_address).fenced
        with pytest.raises(grpc.RpcError) as err:
            admin(m.admin_address).Promote(apb.PromoteRequest(epoch=1))
        assert "stale" in err.value.details()
        st = admin(m.admin_address).Promote(apb.PromoteRequest(epoch=3, insync=["m"]))
        assert (st.role, st.epoch, st.fenced) == ("master", 3, False)
        (new,) = schedule(m.address, b"epoch 3")
        assert MessageId.parse(new, "id").epoch == 3
        # a control plane's Promote grants from its token (none here: it takes office
        # lapsed); the next probe, carrying the Promote's answer's token, grants it
        st = admin(m.admin_address).Promote(apb.PromoteRequest(epoch=4, lease_ms=60_000))
        assert (st.role, st.epoch, st.leased, st.lease_valid) == ("master", 4, True, False)
        st = status(m.admin_address, epoch=4, lease_ms=60_000, lease_token=st.lease_token)
        assert st.lease_valid


def test_an_old_master_back_with_an_unreplicated_tail_is_cut_back(tmp_path: Path) -> None:
    old = node(tmp_path, "a")
    b = node(tmp_path, "b", follow=old.admin_address)
    with nodes(old, b):
        kept = schedule(old.address, *(b"kept%d" % i for i in range(20)))
        wait_for("b", caught_up(old.admin_address, b.admin_address))
        b.stop(signal.SIGKILL)  # b hears nothing more (a SIGSTOP would leave socket buffers)
        lost = schedule(old.address, *(b"lost%d" % i for i in range(10)))
        old.stop(signal.SIGKILL)
        b = node(tmp_path, "b", follow=old.admin_address)  # back on its data; its master is gone
        admin(b.admin_address).Promote(apb.PromoteRequest(epoch=2, insync=["b"]))
        later = schedule(b.address, *(b"later%d" % i for i in range(5)))
        back = node(tmp_path, "a", follow=b.admin_address)  # the old master, on its data
        with nodes(b, back):
            wait_for("the old master to rejoin", caught_up(b.admin_address, back.admin_address))
            st = status(back.admin_address)
            assert (st.role, st.epoch) == ("replica", 2)
            assert [(e.epoch, e.start) for e in st.epochs] == [
                (e.epoch, e.start) for e in status(b.admin_address).epochs
            ]
            stub = public(back.address)
            for i in kept + later:
                assert stub.Lookup(pb.LookupRequest(id=i)).body
            for i in lost:
                with pytest.raises(grpc.RpcError) as err:
                    stub.Lookup(pb.LookupRequest(id=i))
                assert err.value.code() is grpc.StatusCode.NOT_FOUND
            assert "log cut back" in back.logs()


def test_a_replica_of_no_one_waits_for_its_control_plane(tmp_path: Path) -> None:
    m = node(tmp_path, "m")
    r = node(tmp_path, "r", "--role", "replica")  # a pod whose master is not known yet
    with nodes(m, r):
        st = status(r.admin_address)
        assert (st.role, st.master, st.streaming) == ("replica", "", False)
        with pytest.raises(grpc.RpcError) as err:
            schedule(r.address, b"x")
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "this node is a replica" in err.value.details()
        ids = schedule(m.address, b"before")
        admin(r.admin_address).Follow(apb.FollowRequest(epoch=1, master=m.admin_address))
        wait_for("the replica", caught_up(m.admin_address, r.admin_address))
        assert public(r.address).Lookup(pb.LookupRequest(id=ids[0])).body == b"before"


def test_a_promoted_replica_takes_the_receipts_the_old_master_handed_out(tmp_path: Path) -> None:
    """The shard's receipt key comes with the replication stream: the replica saves
    the master's, so after a failover the receipts the old master handed out ack
    at the new one (another group's still do not)."""
    m = node(tmp_path, "m")
    r = node(tmp_path, "r", follow=m.admin_address)
    with nodes(m, r):
        schedule(m.address, b"a", b"b", b"c", delay_ms=0)
        got = public(m.address).Receive(
            pb.ReceiveRequest(topic="t", group="g", max_messages=10, wait_ms=5000)
        )
        assert [x.body for x in got.messages] == [b"a", b"b", b"c"]
        wait_for("the replica", caught_up(m.admin_address, r.admin_address))
        m_key, r_key = ((tmp_path / n / "receipt.key").read_bytes() for n in ("m", "r"))
        assert receiptkey.decode(r_key, "r") == receiptkey.decode(m_key, "m")
        m.stop(signal.SIGKILL)
        admin(r.admin_address).Promote(apb.PromoteRequest(epoch=2, insync=["r"]))
        receipts = [x.receipt for x in got.messages]
        acks = public(r.address).Ack(pb.AckRequest(topic="t", group="g", receipts=receipts[:2]))
        assert [a.outcome for a in acks.results] == [pb.ACK_OUTCOME_ACKED] * 2
        with Client(r.address) as c:
            assert c.ack("t", "other", receipts[2:]) == ["invalid_receipt"]
            assert c.ack("t", "g", receipts[2:]) == ["acked"]
            assert c.receive("t", "g", wait_s=0.2) == []
            others = c.receive("t", "other", max_messages=10, wait_s=2)
            assert [x.body for x in others] == [b"a", b"b", b"c"]


def test_a_silent_stream_ends_on_both_sides_within_seconds(tmp_path: Path) -> None:
    """A peer that stops answering while its TCP connection stays up (SIGSTOP: the
    kernel still acknowledges, so TCP alone would wait ~15 min): the master reports
    the replica not connected, and the replica its stream down, within SILENT_S
    and a few heartbeats."""
    m = node(tmp_path, "m")
    r = node(tmp_path, "r", follow=m.admin_address)
    with nodes(m, r):
        wait_for("the stream", lambda: status(r.admin_address).streaming)
        assert [x.connected for x in status(m.admin_address).replicas] == [True]
        assert r.proc is not None and m.proc is not None
        r.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for("the master to drop the silent replica",
                     lambda: not any(x.connected for x in status(m.admin_address).replicas),
                     timeout_s=SILENT_S + 10)  # fmt: skip
        finally:
            r.proc.send_signal(signal.SIGCONT)
        wait_for("the replica back",
                 lambda: any(x.connected for x in status(m.admin_address).replicas))  # fmt: skip
        m.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for("the replica to give up the silent stream",
                     lambda: not status(r.admin_address).streaming,
                     timeout_s=SILENT_S + 10)  # fmt: skip
        finally:
            m.proc.send_signal(signal.SIGCONT)
        wait_for("the stream again", lambda: status(r.admin_address).streaming)
