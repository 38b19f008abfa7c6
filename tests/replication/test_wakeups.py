"""Replication's waits are woken, not polled. The master's stream: an idle one
waits on the engine's ``replicating.log_growth``, which every CommitLog append
notifies, and a stream that ends leaves no waiter behind. A sync ack (``Followers.wait``):
a report or a role command wakes it, and it sleeps no longer than the master's
lease.

In process: a real engine, its ``ShardNode`` and the admin service on a real
grpc.aio server; the replicas are streams this test opens and answers as a
replica does. The clocks are real: a fake one's waits poll by design. Waits have
long bounds (``LONG_S``) and the tests shorter ones: a wake-up that never came
fails a test, and none is timed."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from delayq import Engine, formats
from delayq.admin.v1 import admin_pb2 as pb
from delayq.admin.v1 import admin_pb2_grpc as rpc
from delayq.clock import SystemClock
from delayq.engine.replicating import Replicating
from delayq.errors import Unavailable
from delayq.formats.commitlog import record_starts
from delayq.replication.follow import entries
from delayq.replication.followers import Followers
from delayq.replication.node import ShardNode
from delayq.server.admin import ShardAdminServicer
from delayq.server.topology import Topology
from delayq.settings import FlushPolicy
from tests.support.engines import req, small_settings

BOUND_S = 60.0
LONG_S = 120.0


@dataclass
class _Stream:
    """One replica's stream, answered as a replica does (a report per chunk)."""

    call: Any
    reports: asyncio.Queue[pb.ReplicaReport] = field(default_factory=asyncio.Queue)

    async def next_chunk(self) -> pb.LogChunk:
        chunk = await asyncio.wait_for(self.call.read(), BOUND_S)
        assert chunk is not grpc.aio.EOF
        end = chunk.position + len(chunk.data)
        self.reports.put_nowait(pb.ReplicaReport(written=end, flushed=end))
        return chunk

    async def next_data(self) -> pb.LogChunk:
        """The next chunk with records (heartbeats before it skipped)."""
        while not (chunk := await self.next_chunk()).data:
            pass
        return chunk


async def _open(stub: rpc.ShardAdminStub, engine: Engine, name: str) -> _Stream:
    """A stream of a replica whose log is the master's as it is now."""
    reports: asyncio.Queue[pb.ReplicaReport] = asyncio.Queue()
    end = engine.commitlog_end
    reports.put_nowait(
        pb.ReplicaReport(
            name=name,
            epochs=entries(engine.replicating.epochs),
            epoch=engine.epoch,
            written=end,
            flushed=end,
        )
    )

    async def requests() -> AsyncIterator[pb.ReplicaReport]:
        while True:
            yield await reports.get()

    stream = _Stream(stub.Replicate(requests()), reports)
    await stream.next_chunk()  # the first: a heartbeat with the receipt key
    return stream


async def _eventually(what: str, check: Callable[[], bool]) -> None:
    async def turn() -> None:
        while not check():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(turn(), BOUND_S)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def _records(data: bytes) -> list[formats.Record]:
    return [formats.decode(data, int(at))[0] for at in record_starts(data, 0)]


Test = Callable[[Engine, ShardNode[Replicating], rpc.ShardAdminStub], Awaitable[None]]


def _with_master(tmp_path: Path, test: Test) -> None:
    engine = Engine(small_settings(tmp_path / "m", replicated=True))

    async def run() -> None:
        node = ShardNode(engine.replicating, name="m", address="127.0.0.1:1")
        server = grpc.aio.server()
        servicer = ShardAdminServicer(node, engine.moving, Topology(None, 0, "127.0.0.1:1"))
        rpc.add_ShardAdminServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            await asyncio.to_thread(engine.start)
            node.started()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await test(engine, node, rpc.ShardAdminStub(channel))
        finally:
            await node.stop()
            await server.stop(None)
            servicer.exports.close()

    try:
        asyncio.run(run())
    finally:
        engine.close()


def test_an_append_wakes_every_idle_stream_and_each_sends_the_record(tmp_path: Path) -> None:
    async def test(engine: Engine, node: ShardNode[Replicating], stub: rpc.ShardAdminStub) -> None:
        streams = [await _open(stub, engine, f"r{i}") for i in range(3)]
        await _eventually("three idle streams", lambda: engine.replicating.log_growth.waiting == 3)
        before = engine.commitlog_end
        (out,) = await asyncio.to_thread(engine.schedule, [req(60_000, b"while idle")])
        assert out.id is not None
        for s in streams:
            chunk = await s.next_data()
            assert chunk.position == before  # from where the stream stood, whole records
            bodies = []
            while b"while idle" not in bodies:  # (a checkpoint may write records too)
                bodies += [r.body for r in _records(chunk.data) if isinstance(r, formats.Message)]
                if b"while idle" not in bodies:
                    chunk = await s.next_data()
        for s in streams:
            s.call.cancel()

    _with_master(tmp_path, test)


def test_a_cancelled_stream_leaves_no_waiter_behind(tmp_path: Path) -> None:
    async def test(engine: Engine, node: ShardNode[Replicating], stub: rpc.ShardAdminStub) -> None:
        stream = await _open(stub, engine, "r0")
        await _eventually("an idle stream", lambda: engine.replicating.log_growth.waiting == 1)
        stream.call.cancel()
        await _eventually("no waiter", lambda: engine.replicating.log_growth.waiting == 0)
        await _eventually("the replica gone", lambda: not node.followers.live("r0"))
        # the log grows on, and nobody is woken or left waiting
        await asyncio.to_thread(engine.schedule, [req(60_000)])
        assert engine.replicating.log_growth.waiting == 0

    _with_master(tmp_path, test)


def test_an_engine_append_wakes_a_reader_of_its_log(tmp_path: Path) -> None:
    """Any write (a schedule, a cancel) grows the CommitLog and tells its readers."""
    engine = Engine(small_settings(tmp_path / "m")).start()
    try:
        (out,) = engine.schedule([req(60_000)])
        assert out.id is not None

        async def read() -> None:
            for write in (lambda: engine.schedule([req(60_000)]), lambda: engine.cancel([out.id])):
                end = engine.commitlog_end
                waiter = asyncio.create_task(engine.replicating.log_growth.wait(end, LONG_S))
                await _eventually("a reader", lambda: engine.replicating.log_growth.waiting == 1)
                await asyncio.to_thread(write)
                await asyncio.wait_for(waiter, BOUND_S)
                assert engine.commitlog_end > end and engine.replicating.log_growth.waiting == 0

        asyncio.run(read())
    finally:
        engine.close()


def _waiting_ack(
    book: Followers, stops_in: Callable[[], float | None]
) -> tuple[threading.Thread, list[object]]:
    """A sync ack of position 100 waiting (``LONG_S``) in a thread of its own: the
    thread and its outcome (None: returned, else the exception)."""
    outcome: list[object] = []

    def run() -> None:
        try:
            book.wait(100, LONG_S, stops_in)
            outcome.append(None)
        except Unavailable as exc:
            outcome.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, outcome


def _book() -> Followers:
    """A master's book with one in-sync replica that holds nothing yet."""
    book = Followers("m", lambda: 100, clock=SystemClock(), min_insync=2)
    book.tell_insync(frozenset({"m", "r"}))
    book.connected("r")
    return book


def test_a_sync_ack_is_woken_by_a_report() -> None:
    book = _book()
    t, outcome = _waiting_ack(book, lambda: None)
    book.report("r", 100, 100)
    t.join(BOUND_S)
    assert outcome == [None]


def test_a_sync_ack_is_woken_when_the_master_stops_acking() -> None:
    book, stopped = _book(), threading.Event()
    t, outcome = _waiting_ack(book, lambda: 0.0 if stopped.is_set() else None)
    stopped.set()
    book.wake()  # (the node, after a role command)
    t.join(BOUND_S)
    (err,) = outcome
    assert isinstance(err, Unavailable) and "lost its lease or was fenced" in str(err)


def test_a_sync_ack_ends_when_the_lease_lapses_untold() -> None:
    book, lapse = _book(), time.monotonic() + 0.2
    t, outcome = _waiting_ack(book, lambda: lapse - time.monotonic())
    t.join(BOUND_S)
    (err,) = outcome
    assert isinstance(err, Unavailable) and "lost its lease or was fenced" in str(err)


def test_a_fence_ends_a_sync_write_waiting_for_its_replicas(tmp_path: Path) -> None:
    settings = small_settings(tmp_path / "m", replicated=True, flush=FlushPolicy.SYNC)
    engine = Engine(settings)
    node = ShardNode(
        engine.replicating,
        name="m",
        address="127.0.0.1:1",
        replication="sync",
        ack_timeout_s=LONG_S,
    )
    engine.start()

    async def run() -> None:
        node.started()
        node.followers.tell_insync(frozenset({"m", "r"}))  # r: never connected
        before = engine.commitlog_end
        write = asyncio.create_task(asyncio.to_thread(engine.schedule, [req(60_000)]))
        # fsynced here: it waits for the replica now (or is about to)
        await _eventually("the write on disk", lambda: engine.replicating.flushed > before)
        await node.fence(engine.epoch)
        try:
            await asyncio.wait_for(write, BOUND_S)
        except Unavailable as exc:
            assert "lost its lease or was fenced" in str(exc)
        else:
            raise AssertionError("a fenced master acknowledged a write no replica holds")

    try:
        asyncio.run(run())
    finally:
        engine.close()
