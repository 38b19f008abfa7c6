"""The admin service ``delayq.admin.v1.ShardAdmin``: roles, epochs and the master's
side of the replication stream (see ``proto/delayq/admin/v1/admin.proto``).

Not the public API: the control plane (``delayq cluster up``'s supervisor, the
operator) and the shard's replicas call it. ``Status`` answers even while the
engine opens. Role commands carry an epoch; one below this node's is
FAILED_PRECONDITION (``ShardNode.check_epoch``). ``Replicate`` compares epoch
histories first: a replica whose log diverged is told where to cut; a replica
at a higher epoch than this master (a stale master) is refused; then whole
records flow from the replica's log end, a heartbeat at least every
``HEARTBEAT_S``, while this node is a master that may deliver and the replica
is live (heard from within ``SILENT_S``: ``replication.followers``). The first
chunk carries the shard's receipt key. An idle stream does not poll: it awaits
the engine's ``replicating.log_growth`` (``store.growth``), told of every CommitLog append,
so a record is sent as soon as it is written, and between records the stream
wakes only for its heartbeat, a lease's lapse, a role command or a shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

import grpc

from ..admin.v1 import admin_pb2 as pb
from ..admin.v1 import admin_pb2_grpc as rpc
from ..argchecks import check_lengths
from ..engine import BlockOutcome, BlockRow, ImportRow, Moving, ReleaseOutcome, Replicating
from ..epochs import EpochHistory
from ..errors import DelayqError, InvalidArgument
from ..replication.follow import entries
from ..replication.followers import HEARTBEAT_S, SILENT_S
from ..replication.node import ShardNode
from ..role import Role
from .exports import Exports
from .statuscodes import abort_with
from .topology import Topology

__all__ = ["MAX_NAME_CHARS", "MAX_NODES", "ShardAdminServicer"]

MAX_MOVE = 10_000  # ids or messages per Release, Import or AddBlock
MAX_NAME_CHARS = 256  # a node name, a host:port or a job name (DNS names stop at 253)
MAX_NODES = 64  # names in an in-sync set
DEFAULT_HOLD_MS = 30_000  # a Prepare's hold: outlasts the job's last pass and the map switch
_RELEASE = {
    ReleaseOutcome.RELEASED: pb.RELEASE_OUTCOME_RELEASED,
    ReleaseOutcome.ALREADY_DELIVERED: pb.RELEASE_OUTCOME_ALREADY_DELIVERED,
    ReleaseOutcome.ALREADY_CANCELLED: pb.RELEASE_OUTCOME_ALREADY_CANCELLED,
    ReleaseOutcome.NOT_FOUND: pb.RELEASE_OUTCOME_NOT_FOUND,
}
_BLOCK = {
    BlockOutcome.BLOCKED: pb.BLOCK_OUTCOME_BLOCKED,
    BlockOutcome.ALREADY_BLOCKED: pb.BLOCK_OUTCOME_ALREADY_BLOCKED,
    BlockOutcome.NOT_PENDING: pb.BLOCK_OUTCOME_NOT_PENDING,
}
log = logging.getLogger("delayq.server.admin")


class ShardAdminServicer(rpc.ShardAdminServicer):  # type: ignore[misc]
    def __init__(self, node: ShardNode[Replicating], moving: Moving, topology: Topology) -> None:
        """``node``: this node's part in its shard, over the engine's replicating
        part; ``moving``: the engine's part the Spark jobs' calls reach."""
        self._node = node
        self._moving = moving
        self._topology = topology
        self.exports = Exports(moving)

    def status(self) -> pb.StatusResponse:
        node, engine = self._node, self._node.engine
        running = engine.running
        master = engine.role is Role.MASTER
        now = node.followers.clock.monotonic_s()  # the clock its followers' times are on
        followers = node.followers.snapshot() if master else []
        insync = node.followers.insync() if master else frozenset()
        end = engine.commitlog_end
        return pb.StatusResponse(
            name=node.name,
            shard=engine.settings.shard,
            address=node.address,
            role=engine.role,
            epoch=node.epoch,
            fenced=engine.fenced,
            lease_valid=engine.delivering(),
            log_end=end,
            flushed=min(engine.flushed, end),
            high_water=node.followers.high_water if master and running else 0,
            insync=sorted(insync),
            replicas=[
                pb.ReplicaState(
                    name=f.name,
                    written=f.written,
                    flushed=f.flushed,
                    lag_bytes=max(0, end - f.written),
                    lag_ms=f.lag_ms(now),
                    connected=f.live(now),
                    insync=f.name in insync,
                )
                for f in followers
            ],
            master=node.master,
            streaming=node.streaming,
            replication=node.replication,
            min_insync=node.min_insync,
            epochs=entries(engine.epochs),
            failovers=node.failovers,
            recovering=not running,
            lease_token=node.tokens.mint(),
            leased=master and engine.lease_bounded(),
        )

    @staticmethod
    async def _names(
        context: grpc.aio.ServicerContext, field: str, values: Sequence[str], most: int = 1
    ) -> None:
        """End the call INVALID_ARGUMENT unless ``values`` are at most ``most`` names of
        at most ``MAX_NAME_CHARS`` each: they are kept, logged and shown to clients."""
        try:
            check_lengths(values, field, MAX_NAME_CHARS, most)
        except InvalidArgument as exc:
            await abort_with(context, exc)

    async def Status(
        self, request: pb.StatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        await self._names(context, "insync", request.insync, MAX_NODES)
        if self._node.engine.running:
            self._node.probed(
                request.epoch, request.lease_ms, frozenset(request.insync), request.lease_token
            )
        return self.status()

    async def Promote(
        self, request: pb.PromoteRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        await self._names(context, "insync", request.insync, MAX_NODES)
        insync = frozenset(request.insync)
        promote = self._node.promote(request.epoch, insync, request.lease_ms, request.lease_token)
        await self._do(context, promote)
        return self.status()

    async def Follow(
        self, request: pb.FollowRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        if not request.master:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "master: give host:port")
        await self._names(context, "master", [request.master])
        await self._do(context, self._node.follow(request.epoch, request.master))
        return self.status()

    async def Fence(
        self, request: pb.FenceRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        await self._do(context, self._node.fence(request.epoch))
        return self.status()

    async def _do(self, context: grpc.aio.ServicerContext, work: object) -> None:
        try:
            await work  # type: ignore[misc]
        except DelayqError as exc:
            await abort_with(context, exc)

    # -- export (the Spark job) ------------------------------------------------
    async def BeginExport(
        self, request: pb.BeginExportRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExportPlan:
        try:
            return await self.exports.begin(
                request.partition_bytes, self._node.engine.role, request.since
            )
        except DelayqError as exc:
            await abort_with(context, exc)

    async def Export(
        self, request: pb.ExportRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ExportBatch]:
        try:
            async for batch in self.exports.read(
                request.snapshot, request.start, request.end, request.batch_rows
            ):
                yield batch
        except DelayqError as exc:
            await abort_with(context, exc)

    async def EndExport(
        self, request: pb.EndExportRequest, context: grpc.aio.ServicerContext
    ) -> pb.EndExportResponse:
        return pb.EndExportResponse(ended=self.exports.end(request.snapshot))

    # -- rebalance (the Spark job) ----------------------------------------------
    async def Release(
        self, request: pb.ReleaseRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseResponse:
        ids = list(request.ids)
        await self._names(context, "target_address", [request.target_address])
        await self._names(context, "job", [request.job])
        try:
            if len(ids) > MAX_MOVE:
                raise InvalidArgument("ids", f"{len(ids)} items; at most {MAX_MOVE} per call")
            self._topology.tell_address(request.target, request.target_address)
            out = await asyncio.to_thread(self._moving.release, ids, request.target)
        except DelayqError as exc:
            await abort_with(context, exc)
        resp = pb.ReleaseResponse()
        for i, o in zip(ids, out, strict=True):
            if isinstance(o, DelayqError):
                resp.results.add(id=i, error=str(o))
            else:
                resp.results.add(id=i, outcome=_RELEASE[o])
        released = sum(1 for o in out if o is ReleaseOutcome.RELEASED)
        log.info(
            "released to another shard",
            extra={"job": request.job, "target": request.target, "released": released},
        )
        return resp

    async def Import(
        self, request: pb.ImportRequest, context: grpc.aio.ServicerContext
    ) -> pb.ImportResponse:
        await self._names(context, "job", [request.job])
        rows = [
            ImportRow(m.source_id, m.topic, m.body, m.deliver_at_ms, m.key, dict(m.headers))
            for m in request.messages
        ]
        try:
            if len(rows) > MAX_MOVE:
                raise InvalidArgument("messages", f"{len(rows)} items; at most {MAX_MOVE}")
            out = await asyncio.to_thread(self._moving.import_messages, rows)
        except DelayqError as exc:
            await abort_with(context, exc)
        resp = pb.ImportResponse()
        for o in out:
            if isinstance(o, DelayqError):
                resp.results.add(error=str(o))
            else:
                resp.results.add(id=o)
        log.info("imported", extra={"job": request.job, "messages": len(rows)})
        return resp

    async def Prepare(
        self, request: pb.PrepareRequest, context: grpc.aio.ServicerContext
    ) -> pb.PrepareResponse:
        await self._names(context, "job", [request.job])
        try:
            since = self._topology.prepare(
                request.owners,
                request.topology_epoch,
                (request.hold_ms or DEFAULT_HOLD_MS) / 1000,
                request.job,
            )
        except DelayqError as exc:
            await abort_with(context, exc)
        return pb.PrepareResponse(held_since_ms=since)

    # -- compaction (the Spark job) ---------------------------------------------
    async def AddBlock(
        self, request: pb.AddBlockRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddBlockResponse:
        rows = [BlockRow(m.id, m.topic, m.deliver_at_ms, m.roll_count) for m in request.rows]
        try:
            if len(rows) > MAX_MOVE:
                raise InvalidArgument("rows", f"{len(rows)} items; at most {MAX_MOVE} per call")
            out = await asyncio.to_thread(
                self._moving.add_block, request.job, request.start_ms, request.end_ms, rows
            )
        except DelayqError as exc:
            await abort_with(context, exc)
        resp = pb.AddBlockResponse()
        for r, o in zip(rows, out, strict=True):
            if isinstance(o, DelayqError):
                resp.results.add(id=r.id, error=str(o))
            else:
                resp.results.add(id=r.id, outcome=_BLOCK[o])
        blocked = sum(1 for o in out if o is BlockOutcome.BLOCKED)
        log.info(
            "compaction block added",
            extra={"job": request.job, "start_ms": request.start_ms, "blocked": blocked},
        )
        return resp

    # -- the stream ----------------------------------------------------------
    async def Replicate(
        self, request_iterator: AsyncIterator[pb.ReplicaReport], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.LogChunk]:
        node, engine = self._node, self._node.engine
        hello = await anext(request_iterator, None)
        if hello is None or not hello.name:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "name: the first report names the replica"
            )
            return
        await self._names(context, "name", [hello.name])
        refusal = self._refusal(hello)
        if refusal:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, refusal)
            return
        theirs = EpochHistory.of((e.epoch, e.start) for e in hello.epochs)
        ours, end = engine.epochs, engine.commitlog_end
        agree = theirs.divergence(hello.written, ours, end)
        if agree is None:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"replica {hello.name}: its log shares no epoch with this master's; "
                "it needs a fresh data directory",
            )
            return
        if agree < hello.written:
            yield pb.LogChunk(position=agree, truncate=True, epochs=entries(ours), epoch=node.epoch)
            return
        followers = node.followers
        followers.connected(hello.name)
        followers.report(hello.name, hello.written, hello.flushed)
        reports = asyncio.create_task(self._reports(hello.name, request_iterator))
        try:
            async for chunk in self._chunks(hello.written, hello.name):
                if reports.done() and not reports.cancelled():
                    broke = reports.exception()
                    if broke is not None:  # a report that did not decode: the call has ended
                        raise broke
                yield chunk
        except DelayqError as exc:  # the replica's position is gone (retention), say
            await abort_with(context, exc)
        finally:
            reports.cancel()
            followers.disconnected(hello.name)

    def _refusal(self, hello: pb.ReplicaReport) -> str:
        node, engine = self._node, self._node.engine
        if not engine.running:
            return "this node is still opening its data; retry shortly"
        if engine.role is not Role.MASTER:
            return f"this node is a replica; its master is {node.master}"
        if hello.epoch > node.epoch:
            return (
                f"replica {hello.name} is at epoch {hello.epoch}, above this master's "
                f"{node.epoch}: this master is stale"
            )
        if not engine.delivering():
            return "this master is fenced or its lease lapsed: it streams nothing"
        return ""

    async def _chunks(self, pos: int, name: str) -> AsyncIterator[pb.LogChunk]:
        node, engine = self._node, self._node.engine
        sent_epochs: EpochHistory | None = None
        beat = 0.0
        while not node.closing and engine.role is Role.MASTER and engine.delivering():
            if not node.followers.live(name):
                log.warning("replica %s silent for %.1f s: ending its stream", name, SILENT_S)
                return
            end = engine.commitlog_end  # (read first: the wait is for growth past it)
            start, data = engine.read_log(pos)
            now = engine.clock.monotonic_s()
            if not data and now - beat < HEARTBEAT_S:
                await engine.log_growth.wait(max(pos, end), self._idle_s(beat, now))
                continue
            history = engine.epochs
            chunk = pb.LogChunk(
                position=start,
                data=data,
                epoch=node.epoch,
                log_end=engine.commitlog_end,
                high_water=node.followers.high_water,
                sent_ms=engine.clock.now_ms(),
                address=node.address,
            )
            if history != sent_epochs:
                chunk.epochs.extend(entries(history))
                if sent_epochs is None:  # the stream's first chunk
                    chunk.receipt_key = engine.receipt_key
                sent_epochs = history
            pos = start + len(data)
            node.followers.sent(name, pos)
            beat = now
            yield chunk

    def _idle_s(self, beat: float, now: float) -> float:
        """How long an idle stream may wait for the log to grow: until its next
        heartbeat is due (the replica's ``SILENT_S`` and this master's view of it
        count on one every ``HEARTBEAT_S``) or its lease lapses (it then streams
        nothing), whichever is first. Role commands and a shutdown wake it at once
        (``ShardNode`` notifies ``log_growth``)."""
        wait = beat + HEARTBEAT_S - now
        lease = self._node.engine.lease_left_s()
        return wait if lease is None else min(wait, lease)

    async def _reports(self, name: str, reports: AsyncIterator[pb.ReplicaReport]) -> None:
        async for r in reports:
            self._node.followers.report(name, r.written, r.flushed)
