"""What a server child process spends per call the benchmark makes: its CPU
(user + system of all its threads, from /proc), or the instructions it runs
under valgrind's callgrind (``Served(callgrind=True)``), which the machine's
load does not move.

Instructions are counted for ``calls`` calls and for ``3 * calls`` more; their
difference over ``2 * calls`` is the cost per call (what the server does
whatever the calls, such as a timer's wake-ups, drops out). Speed is never
asserted.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Served", "cpu_s", "drive"]


def cpu_s(pid: int) -> float:
    """CPU seconds process ``pid`` has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(call: Callable[[], Any], n: int, inflight: int) -> None:
    """Make ``n`` calls (``call()`` starts one and returns its future) with up to
    ``inflight`` of them in flight; raises what a call raised."""
    window: collections.deque[Any] = collections.deque()
    for _ in range(n):
        if len(window) >= inflight:
            window.popleft().result()
        window.append(call())
    for f in window:
        f.result()


class Served:
    """A server child (``cmd``, under callgrind when asked) and its first line of
    output (where it says its port). A context manager: killed at exit."""

    def __init__(
        self, cmd: list[str], *, cwd: Path, env: dict[str, str], callgrind: bool = False
    ) -> None:
        self.callgrind = callgrind
        self._out = Path(tempfile.mkdtemp(prefix="percall-"))
        grind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        grind.append(f"--callgrind-out-file={self._out}/cg")
        self.child = subprocess.Popen(
            [*grind, *cmd] if callgrind else cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if callgrind else None,
            text=True,
            cwd=cwd,
            env=env,
        )
        assert self.child.stdout is not None
        self.line = self.child.stdout.readline()

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *_: object) -> None:
        self.child.kill()
        self.child.wait()
        shutil.rmtree(self._out, ignore_errors=True)

    def _grind(self, *args: str) -> int:
        """Tell callgrind ``args``; the instructions of its dumps so far."""
        subprocess.run(["callgrind_control", *args, str(self.child.pid)], capture_output=True)
        lines = [line for f in self._out.glob("cg*") for line in f.read_text().splitlines()]
        return sum(int(line.split()[1]) for line in lines if line.startswith("totals:"))

    def cost(self, calls: Callable[[int], None], n: int) -> tuple[float, float]:
        """(server CPU µs, or thousands of instructions under callgrind, per call;
        client CPU µs per call, 0 under callgrind) of ``calls(k)``, which makes k
        calls."""
        if self.callgrind:
            self._grind("-i", "on")
            calls(n)
            once = self._grind("-d")
            calls(3 * n)
            thrice = self._grind("-d") - once
            return (thrice - once) / (2 * n) / 1e3, 0.0
        server0, client0 = cpu_s(self.child.pid), time.process_time()
        calls(n)
        server = (cpu_s(self.child.pid) - server0) / n * 1e6
        return server, (time.process_time() - client0) / n * 1e6
