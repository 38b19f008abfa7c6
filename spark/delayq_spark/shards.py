"""The shards' side of the job, over gRPC: the cluster's shard map (GetRoute of
any node), an export snapshot on every shard's master (admin ``BeginExport`` /
``EndExport``), one partition of a snapshot (admin ``Export``) as Arrow
record batches of ``SCHEMA``, and a compaction block (admin ``AddBlock``).

Nothing here reads a shard's files: every row comes from the shard process
itself. Plans are plain data (picklable: Spark ships them to its workers).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass

import grpc
import pyarrow as pa

from delayq.admin.v1 import admin_pb2, admin_pb2_grpc
from delayq.client import Client
from delayq.client.routing import route_of
from delayq.shardmap import ShardEntry, ShardMap
from delayq.tls import TlsConfig, dial

__all__ = [
    "SCHEMA",
    "SCHEMA_DDL",
    "BlockRow",
    "ExportError",
    "Partition",
    "ShardSnapshot",
    "add_block",
    "begin",
    "end",
    "read",
    "shard_map",
]

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("shard", pa.int32()),
        ("epoch", pa.int64()),
        ("position", pa.int64()),
        ("topic", pa.string()),
        ("key", pa.string()),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("body", pa.binary()),
        ("deliver_at_ms", pa.int64()),
        ("accepted_ms", pa.int64()),
        ("roll_count", pa.int32()),
        ("forwarded_to", pa.int32()),
        ("blocked", pa.bool_()),
    ]
)
"""One row per pending message: its id (as clients know it), where it lives (shard,
epoch, CommitLog position), its content, due time (ms since the Unix epoch), when
it was accepted, how many times it was re-parked so far, -1 or the shard a
rebalance released it to (a job that died before its import: a re-run imports
it), and whether it is in a compaction block (pending, no longer re-parked: see
``jobs.compact``)."""

SCHEMA_DDL = (
    "id string, shard int, epoch bigint, position bigint, topic string, key string, "
    "headers map<string,string>, body binary, deliver_at_ms bigint, accepted_ms bigint, "
    "roll_count int, forwarded_to int, blocked boolean"
)
_MAX_MESSAGE = 64 << 20  # an export batch of large bodies
_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    ("grpc.use_local_subchannel_pool", 1),
]


class ExportError(RuntimeError):
    """A shard refused or did not answer an export call."""


@dataclass(frozen=True)
class Partition:
    """One partition of one shard's snapshot: what a Spark task reads."""

    shard: int
    address: str
    """The shard master's admin address."""
    snapshot: str
    start: int
    end: int


@dataclass(frozen=True)
class ShardSnapshot:
    shard: int
    address: str
    """The shard master's admin address (where the snapshot lives)."""
    snapshot: str
    epoch: int
    position: int
    pending: int
    partitions: tuple[tuple[int, int], ...]
    since: int = 0
    """The partitions cover [since, position) (0: everything)."""

    def parts(self) -> list[Partition]:
        return [
            Partition(self.shard, self.address, self.snapshot, a, b) for a, b in self.partitions
        ]

    @staticmethod
    def dumps(snaps: Sequence[ShardSnapshot]) -> str:
        return json.dumps([asdict(s) for s in snaps])

    @staticmethod
    def loads(text: str) -> list[ShardSnapshot]:
        out = []
        for d in json.loads(text):
            d["partitions"] = tuple(tuple(p) for p in d["partitions"])
            out.append(ShardSnapshot(**d))
        return out


def shard_map(server: str, timeout_s: float = 10.0) -> ShardMap:
    """The cluster's shard map, from any of its nodes."""
    with Client(server, timeout_s=timeout_s, tls=TlsConfig.from_env(os.environ, public=True)) as c:
        return route_of(c.route())


def admin_of(entry: ShardEntry) -> str:
    """The admin address of the shard's master: the map's, else from the
    environment (``DELAYQ_ADMIN_ADDRESSES``, ``DELAYQ_ADMIN_PORT``)."""
    return entry.admin_address(os.environ)


def _stub(admin: str) -> tuple[grpc.Channel, admin_pb2_grpc.ShardAdminStub]:
    """The admin service at ``admin`` (DELAYQ_TLS_*: the control plane's certificate)."""
    channel = dial(admin, TlsConfig.from_env(os.environ), _OPTIONS)
    return channel, admin_pb2_grpc.ShardAdminStub(channel)


def _failed(what: str, address: str, exc: grpc.RpcError) -> ExportError:
    return ExportError(f"{what} at {address}: {exc.code().name}: {exc.details()}")


def begin(
    route: ShardMap,
    partition_bytes: int = 0,
    timeout_s: float = 300.0,  # a snapshot walks the shard's log: a big one, a busy node
    since: Mapping[int, int] | None = None,
) -> list[ShardSnapshot]:
    """An export snapshot on every shard's master; all or none (those begun are
    ended again when one fails). ``since``: per shard, an earlier snapshot's
    position: only what was written from there on (the shard says whether it
    could: ``ShardSnapshot.since``)."""
    out: list[ShardSnapshot] = []
    try:
        for entry in route.shards:
            channel, stub = _stub(admin_of(entry))
            with channel:
                try:
                    plan = stub.BeginExport(
                        admin_pb2.BeginExportRequest(
                            partition_bytes=partition_bytes,
                            since=(since or {}).get(entry.index, 0),
                        ),
                        timeout=timeout_s,
                    )
                except grpc.RpcError as exc:
                    raise _failed(f"shard {entry.index}: BeginExport", entry.master, exc) from None
            if plan.shard != entry.index:
                raise ExportError(
                    f"{entry.master} serves shard {plan.shard}, the map says shard {entry.index}"
                )
            out.append(
                ShardSnapshot(
                    shard=plan.shard,
                    address=admin_of(entry),
                    snapshot=plan.snapshot,
                    epoch=plan.epoch,
                    position=plan.position,
                    pending=plan.pending,
                    partitions=tuple((p.start, p.end) for p in plan.partitions),
                    since=plan.since,
                )
            )
    except BaseException:
        end(out)
        raise
    return out


def end(snaps: Sequence[ShardSnapshot], timeout_s: float = 10.0) -> None:
    """End the snapshots (best effort: one a shard no longer has ends by itself)."""
    for s in snaps:
        channel, stub = _stub(s.address)
        with channel, contextlib.suppress(grpc.RpcError):
            stub.EndExport(admin_pb2.EndExportRequest(snapshot=s.snapshot), timeout=timeout_s)


def read(
    part: Partition, batch_rows: int = 0, timeout_s: float = 600.0
) -> Iterator[pa.RecordBatch]:
    """The rows of one partition, a record batch per export batch."""
    channel, stub = _stub(part.address)
    with channel:
        request = admin_pb2.ExportRequest(
            snapshot=part.snapshot, start=part.start, end=part.end, batch_rows=batch_rows
        )
        try:
            for batch in stub.Export(request, timeout=timeout_s):
                yield record_batch(part.shard, batch)
        except grpc.RpcError as exc:
            raise _failed(f"shard {part.shard}: Export", part.address, exc) from None


def record_batch(shard: int, b: admin_pb2.ExportBatch) -> pa.RecordBatch:
    """An ``ExportBatch`` as a record batch of ``SCHEMA``."""
    n = len(b.ids)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(b.ids, pa.string()),
            pa.array([shard] * n, pa.int32()),
            pa.array(b.epochs, pa.int64()),
            pa.array(b.positions, pa.int64()),
            pa.array(b.topics, pa.string()),
            pa.array(b.keys, pa.string()),
            pa.array(_headers(b, n), SCHEMA.field("headers").type),
            pa.array(b.bodies, pa.binary()),
            pa.array(b.deliver_at_ms, pa.int64()),
            pa.array(b.accepted_ms, pa.int64()),
            pa.array(b.roll_counts, pa.int32()),
            pa.array(b.forwarded_to if len(b.forwarded_to) == n else [-1] * n, pa.int32()),
            pa.array(b.blocked if len(b.blocked) == n else [False] * n, pa.bool_()),
        ],
        schema=SCHEMA,
    )


def _headers(b: admin_pb2.ExportBatch, n: int) -> list[list[tuple[str, str]] | None]:
    """Each row's headers (None: none): only the rows ``header_rows`` names have any."""
    out: list[list[tuple[str, str]] | None] = [None] * n
    rows = b.header_rows if b.header_rows or len(b.headers) != n else range(n)  # (older nodes)
    for i, h in zip(rows, b.headers, strict=True):
        out[i] = list(h.entries.items())
    return out


BlockRow = tuple[str, str, int, int]
"""A message to put in a block: its id, topic, due time and roll count (as exported)."""


def add_block(
    address: str,
    job: str,
    start_ms: int,
    end_ms: int,
    rows: Sequence[BlockRow],
    timeout_s: float = 120.0,
) -> list[str]:
    """Put ``rows`` (of the shard whose master's admin service is at ``address``, at most 10,000) in
    the block ``[start_ms, end_ms)`` (admin ``AddBlock``): each row's outcome as
    ``blocked``, ``already_blocked`` or ``not_pending``, or ``error: ...``. A block
    the shard refuses whole (INVALID_ARGUMENT: it starts too soon) gives every row
    ``refused: ...``; other failures raise ``ExportError``."""
    channel, stub = _stub(address)
    request = admin_pb2.AddBlockRequest(
        job=job,
        start_ms=start_ms,
        end_ms=end_ms,
        rows=[
            admin_pb2.BlockedMessage(id=i, topic=t, deliver_at_ms=d, roll_count=n)
            for i, t, d, n in rows
        ],
    )
    with channel:
        try:
            reply = stub.AddBlock(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
                return [f"refused: {exc.details()}"] * len(rows)
            raise _failed("AddBlock", address, exc) from None
    return [
        f"error: {r.error}"
        if r.error
        else admin_pb2.BlockOutcome.Name(r.outcome).removeprefix("BLOCK_OUTCOME_").lower()
        for r in reply.results
    ]
