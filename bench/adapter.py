"""What every system adapter of ``bench.compare`` is built from: the clocks, the
shape of what a consumer gets (``Delivered``, ``Polled``), the ``System`` protocol,
and helpers for the processes a server system runs (free ports, stopping, disk use).
Adapters live in ``bench.systems`` and ``bench.peers``; nothing here knows a system.
"""

from __future__ import annotations

import queue
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

TOPIC = "bench"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def dir_bytes(path: Path) -> int:
    """Bytes really allocated (sparse files count only their written blocks)."""
    if not path.exists():
        return 0
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Delivered = tuple[Any, int, bytes]
"""What a consumer gets per message from ``poll``: handle, due ms, body. Every
system hands over the body, as a consumer needs it (and the benchmark checks it)."""

Polled = tuple[float, list[Delivered]]
"""A batch as the consumer got it: the wall clock (ms, to the µs) when the thread
that received it from the system had it decoded, and its messages. Every system
is stamped at the same point: right after its client call returns in the thread
that made it (a push stream: right after the stream yields, in the thread that
iterates it), never after a hand-off the benchmark itself adds."""


def wall_ms() -> float:
    """The consumer's clock for lateness: ms to the µs (due times are whole ms)."""
    return time.time_ns() / 1e6


class System(Protocol):
    name: str
    in_process: bool

    def open(self, workdir: Path) -> None: ...
    def close(self) -> None: ...
    def schedule(self, items: list[tuple[bytes, int]]) -> list[Any]: ...
    def cancel(self, handles: list[Any]) -> int: ...
    def poll(self, max_n: int, wait_s: float) -> Polled: ...
    def rss_mb(self) -> float: ...
    def disk_bytes(self) -> int: ...
    def restart(self) -> float | None: ...


def stop_process(
    proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout_s: float = 30
) -> int:
    """Signal a spawned server (if it still runs), wait for it, close its pipes;
    return its exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
    code = proc.wait(timeout_s)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    return code


def sleep_poll(fetch: Any, wait_s: float) -> Polled:
    """Poll a system without long-poll support every millisecond until ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        got: list[Delivered] = fetch()
        if got or time.monotonic() >= deadline:
            return wall_ms(), got
        time.sleep(0.001)


def next_batch(inbox: queue.Queue[Polled], wait_s: float) -> Polled:
    """``poll`` of a push system: the next batch its receiving thread stamped and queued,
    or nothing (stamped now) after ``wait_s``."""
    try:
        return inbox.get(timeout=wait_s)
    except queue.Empty:
        return wall_ms(), []


def die_with_parent() -> None:
    """A ``preexec_fn`` for a server a benchmark spawns: the kernel kills it (SIGKILL)
    when the benchmark process dies, however it dies, so no JVM outlives a killed run."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
