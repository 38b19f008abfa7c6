"""A replica's follower loop: stream the master's CommitLog and apply it.

``master`` is the master's admin address (the stream is an admin call); each
chunk names the master's public address, which the replica passes on
(``on_address``) to name it to clients it refuses.

Per connection: send a hello (name, epoch history, log end); the master answers
either "cut your log at P" (the logs diverged: ``Replicating.rewind`` rebuilds from
the cut, then the loop connects again) or chunks from the log end on, the first
with the shard's receipt key (saved before anything is applied:
``Replicating.adopt_receipt_key``). Each chunk
is applied (``Replicating.apply_replicated``) and fsynced, and the written and fsynced
positions go back to the master (what a sync ack waits for). A chunk from an
epoch below this node's is refused. Errors (the master down, a refusal) are
logged once per kind and retried with back-off until ``stop`` is set (a
promotion, another master). A stream that brings nothing for ``SILENT_S`` (the
master sends at least a heartbeat every ``HEARTBEAT_S``) is given up and dialled
again, and the channel sends keepalive pings, so a replica cut off from its
master notices within seconds, not when TCP gives up (~15 min). The loop ends on
``stop``, not on a cancel alone:
grpc.aio swallows a cancel that lands in some phases of a call (the stream then
just ends), and a loop that only watched for cancels would go on for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from ..admin.v1 import admin_pb2 as pb
from ..admin.v1 import admin_pb2_grpc as rpc
from ..epochs import EpochHistory
from ..tls import TlsConfig, dial_aio
from .followers import SILENT_S
from .ports import ReplicaEngine
from .skew import ClockSkew

__all__ = ["follow_master"]

log = logging.getLogger("delayq.replication")

_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
_MAX_MESSAGE = 64 << 20
_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    # pings on the stream's connection: a dead path ends the transport in seconds
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.http2.max_pings_without_data", 0),
]


def entries(history: EpochHistory) -> list[pb.EpochEntry]:
    return [pb.EpochEntry(epoch=e, start=s) for e, s in history.entries]


async def follow_master(
    engine: ReplicaEngine,
    master: str,
    name: str,
    epoch: Callable[[], int],
    streaming: Callable[[bool], None],
    stop: asyncio.Event,
    on_address: Callable[[str], None] = lambda address: None,
    tls: TlsConfig | None = None,
    skew: ClockSkew | None = None,
) -> None:
    """Follow ``master`` until ``stop`` is set (cancel the task as well, to end a
    wait at once); ``on_address`` hears the master's public address; ``skew``
    learns the master's clock from its chunks."""
    failures = 0
    last_error = ""
    while not stop.is_set():
        try:
            cut = await _stream(engine, master, name, epoch, streaming, stop, on_address, tls, skew)
            failures = 0
            if cut is not None and not stop.is_set():
                log.warning("log diverged from the master's: cutting", extra={"at": cut})
                await asyncio.to_thread(engine.rewind, cut)
                continue
        except (grpc.RpcError, _Stale, _Silent) as exc:
            why = (
                f"{exc.code().name}: {exc.details()}"
                if isinstance(exc, grpc.RpcError)
                else str(exc)
            )
            if why != last_error:
                log.warning("replication stream failed", extra={"master": master, "why": why})
                last_error = why
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("replication stream failed", extra={"master": master})
        finally:
            streaming(False)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), _BACKOFF_S[min(failures, len(_BACKOFF_S) - 1)])
        failures += 1


async def _stream(
    engine: ReplicaEngine,
    master: str,
    name: str,
    epoch: Callable[[], int],
    streaming: Callable[[bool], None],
    stop: asyncio.Event,
    on_address: Callable[[str], None],
    tls: TlsConfig | None,
    skew: ClockSkew | None,
) -> int | None:
    """One connection (TLS files read afresh: a rotated certificate is used from the
    next one on); returns where to cut the log when the master says so."""
    reports: asyncio.Queue[pb.ReplicaReport] = asyncio.Queue()
    reports.put_nowait(
        pb.ReplicaReport(
            name=name,
            epochs=entries(engine.epochs),
            epoch=epoch(),
            written=engine.commitlog_end,
            flushed=engine.flushed,
        )
    )

    async def requests() -> AsyncIterator[pb.ReplicaReport]:
        while True:
            yield await reports.get()

    async with dial_aio(master, tls, _OPTIONS) as channel:
        call = rpc.ShardAdminStub(channel).Replicate(requests())
        try:
            return await _apply_stream(
                engine, call, reports, epoch, streaming, master, stop, on_address, skew
            )
        finally:
            call.cancel()  # (a cancelled loop leaves no request task behind)


async def _apply_stream(
    engine: ReplicaEngine,
    call: Any,
    reports: asyncio.Queue[pb.ReplicaReport],
    epoch: Callable[[], int],
    streaming: Callable[[bool], None],
    master: str,
    stop: asyncio.Event,
    on_address: Callable[[str], None],
    skew: ClockSkew | None,
) -> int | None:
    """Apply one stream's chunks, reporting positions back; returns where to cut
    the log when the master says so (None: the stream ended, or ``stop``)."""
    history = EpochHistory()
    address = ""
    while True:
        try:
            chunk = await asyncio.wait_for(call.read(), SILENT_S)
        except TimeoutError:
            raise _Silent(f"nothing from the master at {master} for {SILENT_S} s") from None
        if chunk is grpc.aio.EOF:
            return None
        if skew is not None:
            skew.observe(chunk.sent_ms, engine.clock.now_ms(), engine.clock.monotonic_s())
        if stop.is_set():
            return None
        if chunk.truncate:
            return int(chunk.position)
        if chunk.epoch < epoch():
            raise _Stale(f"the master at {master} is at epoch {chunk.epoch}, below {epoch()}")
        if chunk.epochs:
            history = EpochHistory.of((e.epoch, e.start) for e in chunk.epochs)
        if chunk.address and chunk.address != address:
            address = chunk.address
            on_address(address)
        if chunk.receipt_key:
            await asyncio.to_thread(engine.adopt_receipt_key, chunk.receipt_key)
        streaming(True)
        if chunk.data:
            flushed = await asyncio.to_thread(_apply, engine, chunk.position, chunk.data, history)
            written = engine.commitlog_end
            reports.put_nowait(pb.ReplicaReport(written=written, flushed=flushed))
        elif reports.empty():  # a heartbeat: say where we are
            reports.put_nowait(
                pb.ReplicaReport(written=engine.commitlog_end, flushed=engine.flushed)
            )


def _apply(engine: ReplicaEngine, pos: int, data: bytes, history: EpochHistory) -> int:
    engine.apply_replicated(pos, data, history)
    return engine.sync_log()


class _Stale(Exception):
    """The master streams from an epoch below this node's: it is not the master."""


class _Silent(Exception):
    """The stream brought nothing for ``SILENT_S``: the path to the master is down."""
