"""Passing calls on for messages a rebalance moved away (``timers.rebalance.transfer``), so a
client holding an old id never notices the move (``Forwarder``, used by ``calls``).

- A Cancel, Lookup or Reschedule of an id whose message this shard released to
  shard T is sent on to T's master with the same id (T knows it by its import
  index, which also lists every earlier id of a message moved more than once),
  and T's answer is returned. A target that has not imported the message yet
  (the rebalance is between its two steps) answers UNAVAILABLE, which clients
  retry.
- An id of a shard the map no longer lists (drained and removed), or a message
  forwarded to such a shard, is *searched*: asked of every other shard of the
  map; the first answer other than NOT_FOUND is returned, NOT_FOUND when none
  has it.

Calls go out in delayq's own protocol and their answers come back as the
engine's values (``convert``); another shard's error is ``PassedOn``. A
passed-on call carries ``FORWARDED_BY`` (this shard), a search also ``SEARCH``
(``ownership.Mode``). One channel per target address, kept (``channel``: also
for a front-end's calls passed on in its own protocol).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from ..engine import CancelOutcome, LookupResult, ScheduleOutcome
from ..errors import DelayqError
from ..tls import TlsConfig, dial_aio
from ..v1 import delayq_pb2 as pb
from ..v1 import delayq_pb2_grpc as pb_grpc
from .convert import cancel_answer, looked_up, rescheduled
from .ownership import Mode
from .statuscodes import PassedOn
from .topology import Topology

__all__ = ["FORWARDED_BY", "SEARCH", "Forwarder", "mode_of"]

FORWARDED_BY = "delayq-forwarded-by"
SEARCH = "delayq-search"
_TIMEOUT_S = 10.0


def mode_of(metadata: Sequence[tuple[str, Any]] | None) -> Mode:
    """How a call came (its invocation metadata): from a client, or from a shard."""
    keys = {k for k, _ in metadata or ()}
    if SEARCH in keys:
        return Mode.SEARCH
    return Mode.PASSED_ON if FORWARDED_BY in keys else Mode.CLIENT


class Forwarder:
    def __init__(self, topology: Topology, shard: int, tls: TlsConfig | None = None) -> None:
        self._topology = topology
        self._shard = shard
        self._tls = tls  # how other shards are dialled (None: plaintext)
        self._channels: dict[str, grpc.aio.Channel] = {}

    def channel(self, address: str) -> grpc.aio.Channel:
        """The kept channel to another node's port at ``address``: for delayq's calls
        passed on, and a front-end's own (a RocketMQ send of another shard's key to
        that shard's RocketMQ port, ``rocketmq.passing``)."""
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = dial_aio(address, self._tls)
        return channel

    def _stub(self, address: str) -> pb_grpc.DelayQueueStub:
        return pb_grpc.DelayQueueStub(self.channel(address))

    async def _send(
        self, address: str, method: str, request: Any, timeout_s: float | None, search: bool
    ) -> Any:
        metadata = [(FORWARDED_BY, str(self._shard))] + ([(SEARCH, "1")] if search else [])
        try:
            return await getattr(self._stub(address), method)(
                request,
                timeout=min(timeout_s or _TIMEOUT_S, _TIMEOUT_S),
                metadata=tuple(metadata),
            )
        except grpc.aio.AioRpcError as exc:
            raise PassedOn(exc.code(), exc.details() or "") from None

    async def _call(
        self, target: int | None, method: str, request: Any, timeout_s: float | None
    ) -> Any:
        """``method`` with ``request`` at shard ``target``, or searched for (None, or a
        shard this node cannot reach by the map or a rebalance's word); its answer,
        or ``PassedOn`` with its error."""
        address = None if target is None else self._topology.address_of(target)
        if address is not None:
            return await self._send(address, method, request, timeout_s, search=False)
        return await self._search(method, request, timeout_s)

    async def _search(self, method: str, request: Any, timeout_s: float | None) -> Any:
        """Ask every other shard of the map; the first answer that is not NOT_FOUND."""
        m = self._topology.map
        unreachable: PassedOn | None = None
        for entry in m.shards:
            if entry.index == self._shard:
                continue
            try:
                return await self._send(entry.master, method, request, timeout_s, search=True)
            except PassedOn as exc:
                if exc.code is grpc.StatusCode.NOT_FOUND:
                    continue
                if exc.code is grpc.StatusCode.UNAVAILABLE:
                    unreachable = exc  # a shard that may have it did not answer: retry
                    continue
                raise
        if unreachable is not None:
            raise unreachable
        raise PassedOn(
            grpc.StatusCode.NOT_FOUND,
            "no such message (its shard was removed and no shard holds it now)",
        )

    async def reschedule(
        self,
        target: int | None,
        message_id: str,
        deliver_at_ms: int | None,
        delay_ms: int | None,
        timeout_s: float | None,
    ) -> ScheduleOutcome:
        """A Reschedule at shard ``target`` (None: searched); raises ``PassedOn``."""
        request = pb.RescheduleRequest(id=message_id)
        if deliver_at_ms is not None:
            request.deliver_at_ms = deliver_at_ms
        elif delay_ms is not None:
            request.delay_ms = delay_ms
        return rescheduled(await self._call(target, "Reschedule", request, timeout_s))

    async def lookup(
        self, target: int | None, message_id: str, timeout_s: float | None
    ) -> LookupResult:
        """A Lookup at shard ``target`` (None: searched); raises ``PassedOn``."""
        request = pb.LookupRequest(id=message_id)
        return looked_up(await self._call(target, "Lookup", request, timeout_s))

    async def cancel(
        self, moved: Sequence[tuple[int, str, int | None]], timeout_s: float | None
    ) -> dict[int, CancelOutcome | PassedOn]:
        """Pass on the cancels of moved messages, one call per target shard (``moved``:
        item index, id, target; None: search); the answers by item index (an item
        no shard answered for is left out)."""
        out: dict[int, CancelOutcome | PassedOn] = {}
        by_target: dict[int | None, list[tuple[int, str]]] = {}
        for k, mid, target in moved:
            if target is not None and self._topology.address_of(target) is None:
                target = None
            by_target.setdefault(target, []).append((k, mid))
        for target, items in by_target.items():
            if target is None:
                await self._search_cancels(out, items, timeout_s)
                continue
            request = pb.CancelRequest(ids=[mid for _, mid in items])
            try:
                answer: Any = await self._call(target, "Cancel", request, timeout_s)
            except PassedOn as exc:
                answer = exc
            except DelayqError as exc:
                answer = PassedOn.of(exc)
            for j, (k, _) in enumerate(items):
                got = answer if isinstance(answer, PassedOn) else cancel_answer(answer.results[j])
                out[k] = got
        return out

    async def _search_cancels(
        self,
        out: dict[int, CancelOutcome | PassedOn],
        items: list[tuple[int, str]],
        timeout_s: float | None,
    ) -> None:
        """Cancels of removed shards' messages: each shard in turn is asked for those
        no shard answered yet (a cancel answers per id, NOT_FOUND among them)."""
        left = list(items)
        for entry in self._topology.map.shards:
            if not left or entry.index == self._shard:
                continue
            request = pb.CancelRequest(ids=[mid for _, mid in left])
            try:
                answer = await self._send(entry.master, "Cancel", request, timeout_s, search=True)
            except PassedOn as exc:
                for k, _ in left:
                    out[k] = exc  # kept unless a later shard has it
                continue
            still = []
            for (k, mid), result in zip(left, answer.results, strict=True):
                if result.outcome == pb.CANCEL_OUTCOME_NOT_FOUND:
                    still.append((k, mid))
                else:
                    out[k] = cancel_answer(result)
            left = still

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
