"""Keyed messages of other shards passed on to their owners (``Passing``): a
RocketMQ producer sends to whichever queue (shard) it picked, but a keyed
message belongs to its key's shard (``shardmap.key_shards`` over the map's
active shards), where a lookup, cancel or dedup by that key finds it.

- ``elsewhere``: which rows of a send belong to another shard, by owner (pure;
  none on a node serving alone, which owns every key; keyless rows stay: any
  active shard takes them).
- ``Passing.send``: those rows, one SendMessage per owner, sent to the owner
  master's RocketMQ port (the map's ``rocketmq`` address) through the node's
  kept channels to its peers (``Calls.channel_to``: the peers' TLS), marked
  ``server.forwarding.FORWARDED_BY``; the owner schedules (and deduplicates by
  message id) them as its own, and its entries, renumbered, are the answer's.

Invariants: a send that was passed on is never passed on again (a row its node
does not own, the maps disagreeing for a moment, is refused there: a client
resends); an owner without a RocketMQ address, or whose port fails or does not
answer in time, answers each of its rows HA_NOT_AVAILABLE, naming the shard; a
client's deadline already passed sends nothing (each row PROXY_TIMEOUT: it is
never extended to ``PASS_ON_TIMEOUT_S``); an owner's entries are the rows' in
order, each checked by its message id: a row the answer has no entry of is
INTERNAL_SERVER_ERROR (its outcome unknown), the others keep theirs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

import grpc

from ..server.forwarding import FORWARDED_BY
from ..server.statuscodes import PassedOn
from ..shardmap import ShardMap, key_shards
from .convert import Sendable
from .status import status
from .v2 import definition_pb2 as rmq
from .v2 import service_pb2 as svc
from .v2 import service_pb2_grpc as svc_grpc

__all__ = ["PASS_ON_TIMEOUT_S", "Host", "Passing", "elsewhere"]

PASS_ON_TIMEOUT_S = 10.0
"""The longest a send passed on may take (less when the client's deadline is sooner)."""
_ENTRY = re.compile(r"^messages\[(\d+)\]")


def elsewhere(keys: Sequence[str], shard_map: ShardMap, shard: int) -> dict[int, list[int]]:
    """The rows (indices of ``keys``) whose key belongs to another shard than
    ``shard``, by that shard."""
    if shard_map.standalone or not any(keys):
        return {}
    out: dict[int, list[int]] = {}
    for k, owner in enumerate(key_shards(keys, shard_map.owners).tolist()):
        if owner not in (-1, shard):
            out.setdefault(owner, []).append(k)
    return out


def _renumbered(entry: Any, i: int) -> Any:
    """An owner's entry as the one of message ``i`` of the request it came from (its
    status names ``messages[j]`` of the request passed on)."""
    entry.status.message = _ENTRY.sub(f"messages[{i}]", entry.status.message, count=1)
    return entry


class Host(Protocol):
    """What passing on needs of the node (``server.calls.Calls`` is one)."""

    shard: int

    @property
    def map(self) -> ShardMap: ...

    def channel_to(self, address: str) -> grpc.aio.Channel: ...


class Passing:
    def __init__(self, calls: Host) -> None:
        self._calls = calls

    async def send(self, request: Any, s: Sendable, target: int, timeout_s: float | None) -> None:
        """Send ``s``'s rows (messages of ``request``) to shard ``target``'s RocketMQ
        port; its entries (or its error, each row's) into ``s.entries``. A client's
        deadline already passed (``timeout_s`` 0 or less) sends nothing: each row
        is PROXY_TIMEOUT."""
        m = self._calls.map
        address = m.shards[target].rocketmq if target < m.count else ""
        if not address:
            return _fail(
                s,
                rmq.HA_NOT_AVAILABLE,
                f"the message's key belongs to shard {target}, which has no RocketMQ "
                "address in the shard map",
            )
        if timeout_s is not None and timeout_s <= 0:
            return _fail(
                s,
                rmq.PROXY_TIMEOUT,
                f"the call's deadline passed before the message was passed on to shard "
                f"{target}, its key's",
            )
        passed = svc.SendMessageRequest(messages=[request.messages[i] for i in s.rows])
        stub = svc_grpc.MessagingServiceStub(self._calls.channel_to(address))
        try:
            answer = await stub.SendMessage(
                passed,
                timeout=PASS_ON_TIMEOUT_S
                if timeout_s is None
                else min(timeout_s, PASS_ON_TIMEOUT_S),
                metadata=((FORWARDED_BY, str(self._calls.shard)),),
            )
        except grpc.aio.AioRpcError as exc:
            why = PassedOn(exc.code(), exc.details() or "")
            return _fail(s, rmq.HA_NOT_AVAILABLE, f"shard {target}, the key's: {why}")
        entries = list(answer.entries)
        for k, i in enumerate(s.rows):
            entry = entries[k] if k < len(entries) else None
            sent_id = request.messages[i].system_properties.message_id
            if entry is None or entry.message_id != sent_id:
                s.entries[i].status.CopyFrom(
                    status(
                        rmq.INTERNAL_SERVER_ERROR,
                        f"shard {target}, the key's, answered {len(entries)} entries for "
                        f"{len(s.rows)} messages, none of them this one's: its outcome is "
                        "unknown",
                    )
                )
                continue
            s.entries[i].CopyFrom(_renumbered(entry, i))


def _fail(s: Sendable, code: int, message: str) -> None:
    """Each of ``s``'s rows answered ``code``, ``message``."""
    failed = status(code, message)
    for i in s.rows:
        s.entries[i].status.CopyFrom(failed)
