"""Routes for RocketMQ clients (pure): ``QueryRoute`` and ``QueryAssignment``
answered from the shard map.

A RocketMQ queue is a delayq shard: one ``Broker`` per shard (named
``shard-<i>``, id 0, the master), one queue on it (id 0), accepting NORMAL and
DELAY messages. An active shard's queue is READ_WRITE; a leaving shard's is
READ (it takes no schedules but still delivers); a joining shard's NONE. The
broker's endpoints are where a client reaches that shard's master: the map's
``rocketmq`` address of the shard; a shard without one (a node serving alone)
is named by the endpoints the client asked at, as a RocketMQ proxy does.
"""

from __future__ import annotations

from ..shardmap import ACTIVE, LEAVING, ShardEntry, ShardMap
from .v2 import definition_pb2 as rmq

__all__ = ["BROKER_PREFIX", "assignments", "endpoints", "queues", "shard_of"]

BROKER_PREFIX = "shard-"
_PERMISSION = {ACTIVE: rmq.READ_WRITE, LEAVING: rmq.READ}


def shard_of(queue: rmq.MessageQueue) -> int | None:
    """The shard a queue names by its broker (None: not one of delayq's)."""
    name = queue.broker.name
    if not name.startswith(BROKER_PREFIX) or not name[len(BROKER_PREFIX) :].isdigit():
        return None
    return int(name[len(BROKER_PREFIX) :])


def endpoints(address: str) -> rmq.Endpoints:
    """``address`` (host:port) as RocketMQ endpoints."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if ":" in host:
        scheme = rmq.IPv6
    elif host.replace(".", "").isdigit():
        scheme = rmq.IPv4
    else:
        scheme = rmq.DOMAIN_NAME
    return rmq.Endpoints(scheme=scheme, addresses=[rmq.Address(host=host, port=int(port))])


def _endpoints_of(shard: ShardEntry, asked: rmq.Endpoints) -> rmq.Endpoints:
    return endpoints(shard.rocketmq) if shard.rocketmq else asked


def queues(
    topic: rmq.Resource, shard_map: ShardMap, asked: rmq.Endpoints
) -> list[rmq.MessageQueue]:
    """One queue per shard of the map; ``asked``: the endpoints the client asked at."""
    return [
        rmq.MessageQueue(
            topic=topic,
            id=0,
            permission=_PERMISSION.get(s.state, rmq.NONE),
            broker=rmq.Broker(
                name=f"{BROKER_PREFIX}{s.index}", id=0, endpoints=_endpoints_of(s, asked)
            ),
            accept_message_types=[rmq.NORMAL, rmq.DELAY],
        )
        for s in shard_map.shards
    ]


def assignments(queues: list[rmq.MessageQueue]) -> list[rmq.Assignment]:
    """A PushConsumer's share: every readable queue (delayq's groups share a shard's
    messages, so every consumer may take from every queue)."""
    readable = (rmq.READ, rmq.READ_WRITE)
    return [rmq.Assignment(message_queue=q) for q in queues if q.permission in readable]
