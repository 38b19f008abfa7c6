"""Passing calls on for messages a rebalance moved away (``timers.moving``): a
Cancel, Lookup or Reschedule of an id whose message this shard released to shard
T is sent on to T's master with the same id (T knows it by its import index) and
T's answer is returned, so a client holding an old id never notices the move.

A passed-on call carries ``FORWARDED_BY`` (this shard); a target that has not
imported the message yet (the rebalance is between its two steps) answers
UNAVAILABLE, which clients retry. One channel per target address, kept.
"""

from __future__ import annotations

from typing import Any

import grpc

from ..errors import Unavailable
from ..v1 import delayq_pb2_grpc as pb_grpc
from .topology import Topology

__all__ = ["FORWARDED_BY", "Forwarder", "PassedOn"]

FORWARDED_BY = "delayq-forwarded-by"
_TIMEOUT_S = 10.0


class PassedOn(Exception):
    """The target's own error for a passed-on call: returned to the client as is."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class Forwarder:
    def __init__(self, topology: Topology, shard: int) -> None:
        self._topology = topology
        self._shard = shard
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, target: int) -> pb_grpc.DelayQueueStub:
        address = self._topology.address_of(target)
        if address is None:
            raise Unavailable(
                f"the message moved to shard {target}, whose address this node does not "
                "know yet; retry shortly"
            )
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address)
        return pb_grpc.DelayQueueStub(channel)

    async def call(self, target: int, method: str, request: Any, timeout_s: float | None) -> Any:
        """``method`` of shard ``target`` with ``request``; ``PassedOn`` for its error."""
        stub = self._stub(target)
        try:
            return await getattr(stub, method)(
                request,
                timeout=min(timeout_s or _TIMEOUT_S, _TIMEOUT_S),
                metadata=((FORWARDED_BY, str(self._shard)),),
            )
        except grpc.aio.AioRpcError as exc:
            raise PassedOn(exc.code(), exc.details() or "") from None

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
