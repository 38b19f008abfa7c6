"""RocketMQ 5 clients' routes in a real ``delayq cluster up``: every shard's
queue at its master's RocketMQ port (the shard map's ``rocketmq``), sends and
receives at each, a receive of another shard's queue refused so the client
re-routes, and a recall that arrives at another node than the message's."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from delayq.rocketmq.v2 import definition_pb2 as rmq
from delayq.rocketmq.v2 import service_pb2 as svc
from delayq.rocketmq.v2 import service_pb2_grpc as svc_grpc
from tests.rocketmq.rawcalls import message, name, receive, received, send
from tests.support.cluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


def test_each_shard_is_a_queue_at_its_master_and_a_recall_reaches_any_shard(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "c", shards=2) as c:
        shards = c.current_map().shards
        at = [s.rocketmq for s in shards]
        assert all(at) and len(set(at)) == 2, at
        with (
            grpc.insecure_channel(at[0]) as ch0,
            grpc.insecure_channel(at[1]) as ch1,
        ):
            stubs = [svc_grpc.MessagingServiceStub(ch) for ch in (ch0, ch1)]
            topic, group = name(), name()
            route = svc.QueryRouteRequest()
            route.topic.name = topic
            route.endpoints.scheme = rmq.IPv4
            host, _, port = at[0].rpartition(":")
            route.endpoints.addresses.add(host=host, port=int(port))
            queues = stubs[0].QueryRoute(route, timeout=10).message_queues
            named = {
                q.broker.name: f"{q.broker.endpoints.addresses[0].host}:"
                f"{q.broker.endpoints.addresses[0].port}"
                for q in queues
            }
            assert named == {"shard-0": at[0], "shard-1": at[1]}

            due = int(time.time() * 1000) + 8000
            for i, stub in enumerate(stubs):
                sent = send(stub, message(topic, f"to {i}".encode()))
                assert sent.status.code == rmq.OK, sent
            far = send(stubs[1], message(topic, b"recalled", due_ms=due)).entries[0]
            assert far.status.code == rmq.OK
            for i, stub in enumerate(stubs):
                got = received(stub, topic, group, wait_s=2, shard=i)
                assert [m.body for m in got] == [f"to {i}".encode()]
            st, _, _ = receive(stubs[0], topic, group, wait_s=0.5, shard=1)
            assert st.code == rmq.HA_NOT_AVAILABLE and "shard 1" in st.message

            recall = svc.RecallMessageRequest(recall_handle=far.recall_handle)
            recall.topic.name = topic
            answer = stubs[0].RecallMessage(recall, timeout=10)  # not the message's shard
            assert answer.status.code == rmq.OK, answer
            again = stubs[0].RecallMessage(recall, timeout=10)
            assert again.status.code == rmq.OK and "already" in again.status.message
            time.sleep(max(0.0, due / 1000 - time.time()) + 0.5)
            assert received(stubs[1], topic, group, wait_s=0.5, shard=1) == []
