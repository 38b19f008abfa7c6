"""The systems compared by ``bench.compare``, behind one small interface.

Server systems (a separate process, driven over the loopback):
  delayq         ``delayq serve``, async flush, Python client, batches of 100
  redis          redis-server (appendonly yes, appendfsync everysec): ZADD the due
                 time + HSET the body, one Lua script pops what is due in batches
  rocketmq       an Apache RocketMQ 5 broker + name server, timer wheel at 1000 ms,
                 async flush, driven by RocketMQ's Java client (``bench.peers.rocketmq``)
  rocketmq_100ms the same at 100 ms timer precision
  delayq_rmq5    ``delayq serve --rocketmq-listen``, driven through its RocketMQ 5 port by
                 the official RocketMQ 5 Java client (``bench.peers.rocketmq5``)
  rocketmq5_proxy a name server and rocketmq-proxy 5.5.0 in local mode (timer wheel at
                 100 ms), driven by that same client
In-process systems (run inside the benchmark's worker process):
  delayq_engine  delayq's Engine, same batches
  rocksdb        rocksdict: key = due time + topic + id (big-endian), value = body; scan to
                 now; the WAL is fsynced every second (the others' durability class)
  heap           heapq in memory, no durability: the upper bound of "no disk"

The two driven by the RocketMQ 5 client (``ClientDriven``) run ``bench.compare``'s
uniform and burst workloads through it, one message per request; the rest are
adapters. Every adapter: ``schedule(items) -> handles``, ``cancel(handles) -> n``,
``poll(max_n, wait_s) -> Polled`` (removes what it returns; stamped with the
consumer's clock when its receiving thread got them),
``rss_mb()``, ``disk_bytes()``, ``restart() -> seconds | None`` (after SIGKILL
where the system has a process of its own).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import queue
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench.adapter import (
    TOPIC,
    Delivered,
    Polled,
    System,
    dir_bytes,
    free_port,
    next_batch,
    now_ms,
    sleep_poll,
    stop_process,
    wall_ms,
)
from bench.peers.rocketmq.system import RocketMQ, RocketMQ100ms
from bench.peers.rocketmq5.client import ClientDriven
from bench.peers.rocketmq5.system import RocketMQ5Proxy

ROOT = Path(__file__).resolve().parents[1]
_TOPIC_BYTES = TOPIC.encode()


def spawn_delayq(data: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``delayq serve`` (with ``extra`` options) on a free loopback port;
    return it and its address."""
    proc, address, _ = spawn_delayq_node(data, *extra)
    return proc, address


def spawn_delayq_node(data: Path, *extra: str) -> tuple[subprocess.Popen[str], str, str]:
    """``spawn_delayq``, and the admin address (free loopback ports both)."""
    proc, line = spawn_delayq_line(data, *extra)
    return proc, *served_addresses(line)


def spawn_delayq_line(data: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """``delayq serve`` on free loopback ports (public and admin, no metrics): it, and
    its ready line (``served_address`` reads it)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "delayq.cli.main",
            "serve",
            "--data-dir",
            str(data),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--log-level",
            "warning",
            *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "serving on" not in line:
        stop_process(proc, signal.SIGKILL)
        raise SystemExit(f"delayq did not start: {line!r}")
    return proc, line


def served_addresses(line: str) -> tuple[str, str]:
    """The public and the admin address of ``delayq serving on A (admin B, ...)``."""
    return line.split("serving on ")[1].split()[0], served_address(line, "admin")


def served_address(line: str, name: str) -> str:
    """The address of front-end ``name`` in ``delayq serving on A (admin B, NAME C,
    ...)`` ("" when it serves none)."""
    for part in line.split("(", 1)[-1].rstrip(")\n").split(", "):
        what, _, where = part.partition(" ")
        if what == name:
            return where
    return ""


class DelayqServer:
    name, in_process = "delayq", False

    def open(self, workdir: Path) -> None:
        self.data = workdir / "delayq-data"
        self._start()

    def _start(self) -> None:
        from delayq import Client, Outgoing
        from delayq.client import CancelOutcome

        self._cancelled = CancelOutcome.CANCELLED
        self._outgoing = Outgoing  # imported here, not per call: the adapters' loops stay lean
        self.proc, address = spawn_delayq(self.data)
        self.client = Client(address, timeout_s=30)
        self._stream: Any = None

    def _subscribe(self) -> None:
        """One Subscribe stream (auto-ack: consumed as pushed, like the peers'
        destructive pops) iterated by a thread, the consumer's receiving thread,
        which stamps each batch as it gets it and queues it for ``poll``."""
        from delayq.client import ClientError

        self._inbox: queue.Queue[Polled] = queue.Queue()
        self._stream = self.client.subscribe(
            TOPIC, "bench", max_messages=1000, wait_s=0.2, auto_ack=True
        )

        def pump(stream: Any, inbox: queue.Queue[Polled]) -> None:
            with contextlib.suppress(ClientError):  # ends when the server is killed
                for batch in stream:
                    got = [(m.id, m.deliver_at_ms, m.body) for m in batch]
                    inbox.put((wall_ms(), got))

        threading.Thread(target=pump, args=(self._stream, self._inbox), daemon=True).start()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
        self.client.close()
        stop_process(self.proc)

    def schedule(self, items: list[tuple[bytes, int]]) -> list[Any]:
        make = self._outgoing
        out = self.client.schedule_many([make(topic=TOPIC, body=b, at=at) for b, at in items])
        return [o.id for o in out]

    def cancel(self, handles: list[Any]) -> int:
        return self.client.cancel(*handles).count(self._cancelled)

    def poll(self, max_n: int, wait_s: float) -> Polled:
        if self._stream is None:
            self._subscribe()
        return next_batch(self._inbox, wait_s)  # batches of at most 1000 (max_n)

    def rss_mb(self) -> float:
        return float(psutil.Process(self.proc.pid).memory_info().rss / 2**20)

    def disk_bytes(self) -> int:
        return dir_bytes(self.data)

    def restart(self) -> float:
        if self._stream is not None:
            self._stream.cancel()
        self.client.close()
        stop_process(self.proc, signal.SIGKILL)
        t0 = time.perf_counter()
        self._start()
        self.client.stats()  # serving again
        return time.perf_counter() - t0


class DelayqRmq5(ClientDriven):
    """``delayq serve`` with a RocketMQ 5 port, the official Java client's endpoint."""

    name = "delayq_rmq5"

    def open(self, workdir: Path) -> None:
        self.dir = workdir
        self.data = workdir / "delayq-data"
        self.proc, line = spawn_delayq_line(self.data, "--rocketmq-listen", "127.0.0.1:0")
        self.endpoint = served_address(line, "rocketmq")

    def close(self) -> None:
        self.close_client()
        stop_process(self.proc)

    def rss_mb(self) -> float:
        return float(psutil.Process(self.proc.pid).memory_info().rss / 2**20)

    def disk_bytes(self) -> int:
        return dir_bytes(self.data)

    def restart(self) -> None:
        return None


class RedisZset:
    """The classic sorted-set delay queue."""

    name, in_process = "redis", False
    POP = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2])
if #due == 0 then return {} end
local ids = {}
for i = 1, #due, 2 do ids[#ids + 1] = due[i] end
local bodies = redis.call('HMGET', KEYS[2], unpack(ids))
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
return {due, bodies}
"""

    def open(self, workdir: Path) -> None:
        if shutil.which("redis-server") is None:
            raise SystemExit("redis-server is not installed (make test installs it)")
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True)
        self.port = free_port()
        self._ids = itertools.count()
        self._start()

    def _start(self) -> None:
        import redis

        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                # no automatic AOF rewrite mid-run: a rewrite inside the far-future
                # phase compacts earlier history and makes its disk growth meaningless
                "--auto-aof-rewrite-percentage",
                "0",
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.r = redis.Redis(port=self.port)
        while True:  # until it accepts commands (it answers LOADING while reading its AOF)
            try:
                self.r.dbsize()
                break
            except (redis.ConnectionError, redis.BusyLoadingError):
                time.sleep(0.005)
        self.pop = self.r.register_script(self.POP)

    def close(self) -> None:
        self.r.close()
        stop_process(self.proc)

    def schedule(self, items: list[tuple[bytes, int]]) -> list[Any]:
        ids = [f"m{next(self._ids)}" for _ in items]
        p = self.r.pipeline(transaction=False)
        for i, (body, at) in zip(ids, items, strict=True):
            p.hset("dq:body", i, body)  # the body first: a popped id always has one
            p.zadd("dq:due", {i: at})
        p.execute()
        return ids

    def cancel(self, handles: list[Any]) -> int:
        p = self.r.pipeline(transaction=False)
        for h in handles:
            p.zrem("dq:due", h)
            p.hdel("dq:body", h)
        return sum(p.execute()[::2])

    def poll(self, max_n: int, wait_s: float) -> Polled:
        def fetch() -> list[Delivered]:
            got = self.pop(keys=["dq:due", "dq:body"], args=[now_ms(), min(max_n, 1000)])
            if not got:
                return []
            flat, bodies = got
            return [
                (flat[2 * i].decode(), int(flat[2 * i + 1]), body) for i, body in enumerate(bodies)
            ]

        return sleep_poll(fetch, wait_s)

    def rss_mb(self) -> float:
        return float(psutil.Process(self.proc.pid).memory_info().rss / 2**20)

    def disk_bytes(self) -> int:
        return dir_bytes(self.dir)

    def restart(self) -> float:
        self.r.close()
        stop_process(self.proc, signal.SIGKILL)
        t0 = time.perf_counter()
        self._start()
        return time.perf_counter() - t0


class DelayqEngine:
    name, in_process = "delayq_engine", True

    def open(self, workdir: Path) -> None:
        from delayq import Engine, EngineSettings
        from delayq.engine import CancelOutcome, ScheduleBatch

        self._batch, self._cancelled = ScheduleBatch, CancelOutcome.CANCELLED
        self.data = workdir / "engine"
        self.engine = Engine(EngineSettings(data_dir=self.data)).start()

    def close(self) -> None:
        self.engine.close()

    def schedule(self, items: list[tuple[bytes, int]]) -> list[Any]:
        bodies, dues = zip(*items, strict=True)
        batch = self._batch(topic=TOPIC, bodies=bodies, deliver_at_ms=dues)
        return self.engine.schedule_batch(batch).ids

    def cancel(self, handles: list[Any]) -> int:
        # one count (a generator comparing each outcome cost ~25 µs per 100)
        return self.engine.cancel(handles).count(self._cancelled)

    def poll(self, max_n: int, wait_s: float) -> Polled:
        msgs = self.engine.receive(
            TOPIC, "bench", max_messages=max_n, wait_ms=round(wait_s * 1000), auto_ack=True
        )
        return wall_ms(), [(m.id, m.deliver_at_ms, m.body) for m in msgs]

    def rss_mb(self) -> float:
        return _own_peak_rss_mb()

    def disk_bytes(self) -> int:
        return dir_bytes(self.data)

    def restart(self) -> float:
        from delayq import Engine, EngineSettings

        self.engine.abandon()  # as after SIGKILL: nothing flushed, nothing checkpointed
        t0 = time.perf_counter()
        self.engine = Engine(EngineSettings(data_dir=self.data)).start()
        self.engine.stats()
        return time.perf_counter() - t0


class RocksKeyed:
    """RIP-43's alternative: a time-ordered key space in an LSM tree."""

    name, in_process = "rocksdb", True
    # key = delivery time + topic + id (as RIP-43 sketches it), big-endian so that
    # byte order is time order
    _KEY = struct.Struct(f">Q{len(TOPIC)}sQ")

    def open(self, workdir: Path) -> None:
        self.path = workdir / "rocks"
        self._ids = itertools.count()
        self._open()

    def _open(self) -> None:
        from rocksdict import Rdict, WriteBatch

        self._write_batch = WriteBatch
        self.db = Rdict(str(self.path))
        # the durability class of the others (delayq's async flush, Redis' everysec):
        # writes reach the OS at once (the WAL), and are fsynced every second
        self._stop_sync = threading.Event()
        self._syncer = threading.Thread(target=self._sync_wal, args=(self.db,), daemon=True)
        self._syncer.start()

    def _sync_wal(self, db: Any) -> None:
        while not self._stop_sync.wait(1.0):
            db.flush_wal(True)

    def _stop_syncer(self) -> None:
        self._stop_sync.set()
        self._syncer.join()

    def close(self) -> None:
        self._stop_syncer()
        self.db.close()

    def schedule(self, items: list[tuple[bytes, int]]) -> list[Any]:
        wb = self._write_batch()
        keys = []
        for body, at in items:
            k = self._KEY.pack(at, _TOPIC_BYTES, next(self._ids))
            wb.put(k, body)
            keys.append(k)
        self.db.write(wb)
        return keys

    def cancel(self, handles: list[Any]) -> int:
        wb = self._write_batch()
        found = 0
        for k in handles:
            if self.db.get(k) is not None:
                wb.delete(k)
                found += 1
        self.db.write(wb)
        return found

    def poll(self, max_n: int, wait_s: float) -> Polled:
        def fetch() -> list[Delivered]:
            limit = now_ms()
            it = self.db.iter()
            it.seek_to_first()
            out: list[Delivered] = []
            wb = self._write_batch()
            while it.valid() and len(out) < max_n:
                k = it.key()
                at = self._KEY.unpack(k)[0]  # keys of one topic: the whole space here
                if at > limit:
                    break
                out.append((k, at, it.value()))
                wb.delete(k)
                it.next()
            del it
            if out:
                self.db.write(wb)
            return out

        return sleep_poll(fetch, wait_s)

    def rss_mb(self) -> float:
        return _own_peak_rss_mb()

    def disk_bytes(self) -> int:
        return dir_bytes(self.path)

    def restart(self) -> float:
        self._stop_syncer()
        del self.db  # dropped unflushed, as after SIGKILL (the WAL has every write)
        t0 = time.perf_counter()
        self._open()
        self.db.get(b"probe")
        return time.perf_counter() - t0


class Heap:
    """heapq in memory: no durability, the upper bound of what no disk costs."""

    name, in_process = "heap", True

    def open(self, workdir: Path) -> None:
        self.heap: list[tuple[int, int]] = []
        self.bodies: dict[int, bytes] = {}
        self._ids = itertools.count()

    def close(self) -> None:
        self.heap.clear()

    def schedule(self, items: list[tuple[bytes, int]]) -> list[Any]:
        ids = []
        for body, at in items:
            i = next(self._ids)
            heapq.heappush(self.heap, (at, i))
            self.bodies[i] = body
            ids.append(i)
        return ids

    def cancel(self, handles: list[Any]) -> int:
        return sum(self.bodies.pop(h, None) is not None for h in handles)  # lazy deletion

    def poll(self, max_n: int, wait_s: float) -> Polled:
        def fetch() -> list[Delivered]:
            limit = now_ms()
            out: list[Delivered] = []
            while self.heap and self.heap[0][0] <= limit and len(out) < max_n:
                at, i = heapq.heappop(self.heap)
                body = self.bodies.pop(i, None)
                if body is not None:
                    out.append((i, at, body))
            return out

        return sleep_poll(fetch, wait_s)

    def rss_mb(self) -> float:
        return _own_peak_rss_mb()

    def disk_bytes(self) -> int:
        return 0

    def restart(self) -> float | None:
        return None  # nothing survives a restart


def current_rss_bytes(system: Any) -> int:
    """The system's resident memory now (its server process, or this process)."""
    if system.in_process:
        return int(psutil.Process(os.getpid()).memory_info().rss)
    return int(system.rss_mb() * 2**20)  # its processes (a peer may run several)


def _own_peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


SYSTEMS: dict[str, type[Any]] = {
    s.name: s
    for s in (
        DelayqServer,
        RedisZset,
        RocketMQ,
        RocketMQ100ms,
        DelayqRmq5,
        RocketMQ5Proxy,
        DelayqEngine,
        RocksKeyed,
        Heap,
    )
}
PAIRS = {  # peer: the delayq side its ratios are printed against
    "rocketmq": "delayq",
    "rocketmq_100ms": "delayq",
    "redis": "delayq",
    "rocketmq5_proxy": "delayq_rmq5",
    "rocksdb": "delayq_engine",
    "heap": "delayq_engine",
}


def peak_rss_sampler(system: Any) -> Any:
    """For server systems: a thread sampling the server's RSS; returns a getter."""
    import threading

    peak = [0.0]
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.2):
            # the server may be between a kill and its restart: skip that sample
            with contextlib.suppress(psutil.Error, AttributeError, OSError):
                peak[0] = max(peak[0], system.rss_mb())

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def done() -> float:
        stop.set()
        t.join()
        return round(max(peak[0], float(system.rss_mb())), 1)

    return done


__all__ = [
    "PAIRS",
    "SYSTEMS",
    "Delivered",
    "System",
    "current_rss_bytes",
    "dir_bytes",
    "free_port",
    "now_ms",
    "peak_rss_sampler",
    "stop_process",
    "wall_ms",
]
