"""The RocketMQ 5 broker as a ``bench.compare`` system: a NameServer and a Broker (timer
wheel on, async flush, store under the workdir, fixed small heaps) on free loopback
ports, and ``Driver.java`` (RocketMQ's own client) as the producer and consumer.

Two systems: ``rocketmq`` at the broker's default timer precision (1000 ms) and
``rocketmq_100ms``. Handles are the driver's message numbers; cancel is RocketMQ 5's
recall (the recall handle of each send). RSS is the broker's and the name server's
(the JVMs'); restart kills the broker with SIGKILL and times until it takes a send.
Resends (sends the broker refused as busy, then sent again) are counted in
``resends`` and printed by ``close``. Everything started is stopped by ``close``, and
the kernel kills the JVMs if the benchmark dies first.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import psutil

from bench.adapter import (
    TOPIC,
    Delivered,
    Polled,
    die_with_parent,
    dir_bytes,
    free_port,
    next_batch,
    stop_process,
)

from .install import Peer, ensure

MAX_DELAY_S = 100 * 86_400  # covers bench.compare's far-future workload (3..90 days)
START_TIMEOUT_S = 120.0
CLUSTER = "bench-cluster"
_HEAD = struct.Struct(">qi")  # 'D': stamp_us, n  /  'R': n (then n longs)
_ITEM = struct.Struct(">qqi")  # handle, due_ms, body length


def jvm(peer: Peer, home: Path, heap: str, *extra: str) -> list[str]:
    """A java command line with a fixed heap whose logs and state stay under ``home``."""
    return [
        "java",
        "-server",
        "-XX:+UseG1GC",
        f"-Xms{heap}",
        f"-Xmx{heap}",
        f"-Duser.home={home}",
        f"-Drocketmq.home.dir={home}",
        *extra,
        "-cp",
        peer.classpath,
    ]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def broker_port() -> int:
    """A listen port whose neighbours the broker also takes (port-2 and port+1) are free."""
    while True:
        port = free_port()
        if port > 1026 and _port_free(port - 2) and _port_free(port + 1):
            return port


def wait_port(port: int, proc: subprocess.Popen[Any], what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}; see {log}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on {port} within {START_TIMEOUT_S:.0f} s; see {log}")


class RocketMQServers:
    """What both RocketMQ peers start: the jars, a name server, a broker's config."""

    precision_ms = 1000

    @property
    def namesrv_address(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def start_namesrv(self, where: Path) -> None:
        """The jars (fetched and compiled when missing), ``where`` made, a name server
        started there on a free port and listening."""
        self.peer = ensure()
        self.dir = where
        self.store = self.dir / "store"
        self.home = self.dir / "home"
        self.home.mkdir(parents=True)
        self.namesrv_port = free_port()
        self.namesrv = self._spawn("namesrv", [
            *jvm(self.peer, self.home, "256m"),
            "org.apache.rocketmq.namesrv.NamesrvStartup",
            "-c", str(self.write_conf("namesrv.conf", listenPort=self.namesrv_port)),
        ])  # fmt: skip
        wait_port(self.namesrv_port, self.namesrv, "the name server", self.dir / "namesrv.log")

    def broker_keys(self, port: int) -> dict[str, object]:
        """broker.conf's keys for a broker on ``port`` with the timer wheel at
        ``precision_ms``, its store under the workdir."""
        return {
            "brokerClusterName": CLUSTER,  # not TOPIC: these names are system topics
            "brokerName": "bench-broker",
            "brokerId": 0,
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "brokerIP1": "127.0.0.1",
            "listenPort": port,
            "namesrvAddr": self.namesrv_address,
            "storePathRootDir": self.store,
            "storePathCommitLog": self.store / "commitlog",
            "mappedFileSizeCommitLog": 256 << 20,
            "autoCreateTopicEnable": "false",  # the driver creates its topic
            "timerWheelEnable": "true",
            "timerPrecisionMs": self.precision_ms,
            "timerMaxDelaySec": MAX_DELAY_S,
            "recallMessageEnable": "true",  # refused by default ("operation is forbidden")
        }

    def write_conf(self, name: str, **keys: object) -> Path:
        path = self.dir / name
        path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
        return path

    def _spawn(self, what: str, cmd: list[str]) -> subprocess.Popen[Any]:
        with (self.dir / f"{what}.log").open("ab") as log:  # the child keeps its own copy
            return subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir, preexec_fn=die_with_parent
            )


class RocketMQ(RocketMQServers):
    name, in_process = "rocketmq", False

    def open(self, workdir: Path) -> None:
        self.start_namesrv(workdir / "rocketmq")
        self.conf = self.write_conf("broker.conf", **self.broker_keys(port := broker_port()))
        self.broker_address = f"127.0.0.1:{port}"
        self._start_broker()
        self.resends = 0
        self.inbox: queue.Queue[Polled] = queue.Queue()
        self.replies: queue.Queue[list[int] | str] = queue.Queue()
        driver = [*jvm(self.peer, self.home, "512m"), "Driver"]
        with (self.dir / "driver.log").open("ab") as log:
            self.driver = subprocess.Popen(
                [*driver, self.namesrv_address, self.broker_address, TOPIC],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                preexec_fn=die_with_parent,
            )
        self.reader = threading.Thread(target=self._read, args=(self.driver.stdout,), daemon=True)
        self.reader.start()
        self._reply(START_TIMEOUT_S)  # producer and consumer started

    def _start_broker(self) -> None:
        self.broker = self._spawn("broker", [
            *jvm(self.peer, self.home, "512m", "-XX:MaxDirectMemorySize=1g"),
            "org.apache.rocketmq.broker.BrokerStartup",
            "-c", str(self.conf),
            "-n", self.namesrv_address,
        ])  # fmt: skip

    def _read(self, pipe: IO[bytes]) -> None:
        """The driver's frames: deliveries to ``inbox``, answers to ``replies``."""
        read = pipe.read
        while kind := read(1):
            if kind == b"D":
                stamp_us, n = _HEAD.unpack(read(_HEAD.size))
                got: list[Delivered] = []
                for _ in range(n):
                    handle, due, size = _ITEM.unpack(read(_ITEM.size))
                    got.append((handle, due, read(size)))
                self.inbox.put((stamp_us / 1000, got))
            elif kind == b"R":
                (n,) = struct.unpack(">i", read(4))
                self.replies.put(list(struct.unpack(f">{n}q", read(8 * n))))
            else:  # b"E": a Java modified-UTF-8 string
                (size,) = struct.unpack(">H", read(2))
                self.replies.put(read(size).decode(errors="replace"))
        self.replies.put("the driver exited")

    def _reply(self, timeout_s: float = 600.0) -> list[int]:
        try:
            got = self.replies.get(timeout=timeout_s)
        except queue.Empty:
            raise SystemExit(f"the RocketMQ driver did not answer; see {self.dir}") from None
        if isinstance(got, str):
            raise SystemExit(f"the RocketMQ driver failed: {got}; see {self.dir}/driver.log")
        return got

    def _ask(self, frame: bytes) -> list[int]:
        stdin = self.driver.stdin
        assert stdin is not None
        stdin.write(frame)
        stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.resends:
            print(f"{self.name}: {self.resends} busy sends sent again", file=sys.stderr)
        if self.driver.poll() is None:
            with contextlib.suppress(BrokenPipeError):
                self._send_quit()
        try:
            self.driver.wait(10)
        except subprocess.TimeoutExpired:  # stuck mid-command: nothing left to keep
            self.driver.kill()
            self.driver.wait(30)
        self.reader.join(10)
        assert self.driver.stdout is not None
        self.driver.stdout.close()
        for proc in (self.broker, self.namesrv):
            if proc.poll() is None:
                proc.kill()  # nothing to keep: a clean broker shutdown takes ~11 s
            proc.wait(30)

    def _send_quit(self) -> None:
        stdin = self.driver.stdin
        assert stdin is not None
        stdin.write(b"Q")
        stdin.close()

    def schedule(self, items: list[tuple[bytes, int]]) -> list[Any]:
        parts = [b"S", struct.pack(">i", len(items))]
        for body, at in items:
            parts += (struct.pack(">qi", at, len(body)), body)
        first, resends = self._ask(b"".join(parts))
        self.resends += resends
        return list(range(first, first + len(items)))

    def cancel(self, handles: list[Any]) -> int:
        (found,) = self._ask(struct.pack(f">ci{len(handles)}q", b"C", len(handles), *handles))
        return found

    def poll(self, max_n: int, wait_s: float) -> Polled:
        return next_batch(self.inbox, wait_s)  # batches of at most 256 (max_n >= 256)

    def rss_mb(self) -> float:
        pids = (self.broker.pid, self.namesrv.pid)
        return float(sum(psutil.Process(p).memory_info().rss for p in pids) / 2**20)

    def disk_bytes(self) -> int:
        return dir_bytes(self.store)

    def restart(self) -> float:
        stop_process(self.broker, signal.SIGKILL)
        t0 = time.perf_counter()
        self._start_broker()
        self._ask(b"P")  # the broker takes a send again
        return time.perf_counter() - t0


class RocketMQ100ms(RocketMQ):
    name = "rocketmq_100ms"
    precision_ms = 100
