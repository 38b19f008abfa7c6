"""``LocalCluster``: ``delayq cluster up`` as a subprocess on a directory and a free
range of loopback ports, for tests that need several shards of real processes.

    with LocalCluster(tmp_path / "cluster", shards=3) as c:
        with delayq.Client(c.address(0)) as client: ...
        c.kill(1)                  # SIGKILL shard 1's node; returns once it is reaped
        c.wait_serving()           # every node serving again (the status JSON)

    with LocalCluster(tmp_path / "c", shards=1, replicas=3, args=("--replication", "sync")) as c:
        c.wait_insync(0, 3)        # the recorded in-sync set has all three
        c.kill(0, node=1)          # SIGKILL a replica
        c.record(0)                # shard 0's record in cluster.json (epoch, master, insync)
        c.wait_record(0, lambda r: r["epoch"] > 1)   # e.g. until a failover was recorded

``env``: variables added to the supervisor's environment, which its nodes
inherit (e.g. ``{"DELAYQ_PUSH_ALLOW": "127.0.0.1/32"}``: a setting of every node).

The supervisor runs in a session of its own and its nodes in its process group,
so whatever happens (a failed start, a test that raises, ``stop``) the whole group
is killed at the end: no process outlives the helper. ``stop`` first asks
nicely (SIGTERM) and returns the exit code, so a test can check the clean stop.
The supervisor's stderr (JSON log lines) is ``supervisor_log``, next to DIR.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc

from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.cluster.freeports import is_free
from delayq.cluster.layout import HOST, PORTS_PER_NODE
from delayq.cluster.readylines import READY_PREFIX
from delayq.shardmap import ShardMap, parse
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as rpc
from tests.support.servers import ROOT

__all__ = ["LocalCluster", "cluster_cli", "free_base_port"]

PORT_RANGE = (20_000, 32_000)
"""Below Linux's ephemeral range (32768+), where outgoing connections take ports."""


def free_base_port(count: int, tries: int = 100) -> int:
    """A base port whose ``count`` ports are all free now (picked at random, so that
    concurrent test runs seldom collide)."""
    for _ in range(tries):
        base = random.randrange(PORT_RANGE[0], PORT_RANGE[1] - count)
        if all(is_free(HOST, p) for p in range(base, base + count)):
            return base
    raise AssertionError(f"no {count} free ports in a row on {HOST}")


def delayq_cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``delayq ARGS`` run to its end, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "delayq.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def cluster_cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``delayq cluster ARGS`` run to its end."""
    return delayq_cli("cluster", *args, timeout_s=timeout_s)


@contextlib.contextmanager
def running_cluster_cli(*args: str) -> Iterator[subprocess.Popen[str]]:
    """``delayq cluster ARGS`` started in the background (text pipes), for a test to
    act while it runs; on the way out (a failed assertion too) it is killed if it
    still runs and its pipes are read and closed: nothing outlives the test."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "delayq.cli.main", "cluster", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


class LocalCluster:
    def __init__(
        self,
        dir: Path,
        *,
        shards: int = 3,
        replicas: int = 1,
        args: tuple[str, ...] = (),
        base_port: int | None = None,
        start_timeout_s: float = 60,
        command: tuple[str, ...] = (sys.executable, "-m", "delayq.cli.main", "cluster", "up"),
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``command``: what runs ``cluster up`` (options are appended); ``env``:
        added to its environment (the nodes inherit it)."""
        self.dir = dir
        self.shards = shards
        self.replicas = replicas
        self.args = args
        self.base_port = base_port
        self.start_timeout_s = start_timeout_s
        self.command = command
        self.env = dict(env or {})
        self.supervisor_log = dir.with_name(dir.name + "-supervisor.log")
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        """What the supervisor printed on stdout so far."""
        self.map: ShardMap | None = None
        self._seen = threading.Condition()
        self._reader: threading.Thread | None = None

    # -- life
    def start(self) -> LocalCluster:
        if self.base_port is None:
            self.base_port = free_base_port(PORTS_PER_NODE * self.shards * self.replicas)
        cmd = [
            *self.command,
            "--dir",
            str(self.dir),
            "--shards",
            str(self.shards),
            "--base-port",
            str(self.base_port),
            *(("--replicas", str(self.replicas)) if self.replicas != 1 else ()),
            "--log-format",
            "json",
            *self.args,
        ]
        with open(self.supervisor_log, "a") as err:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self._wait_line(READY_PREFIX, self.start_timeout_s)
            self.map = parse((self.dir / "shards.json").read_text())
        except BaseException:
            self._kill_group()
            raise
        return self

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        self._kill_group()

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        """Signal the supervisor, wait for it and return its exit code; then make
        sure nothing of the group is left (SIGKILL)."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._kill_group()

    def group_alive(self) -> bool:
        """Whether any process of the supervisor's group still runs (or is unreaped)."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def _kill_group(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        if self._reader is not None:
            self._reader.join(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()
        with self._seen:
            self.lines.append("")  # EOF: the supervisor exited
            self._seen.notify_all()

    def _wait_line(self, prefix: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        with self._seen:
            while True:
                for line in self.lines:
                    if line.startswith(prefix):
                        return line
                left = deadline - time.monotonic()
                if (self.lines and self.lines[-1] == "") or left <= 0:
                    break
                self._seen.wait(left)
        raise AssertionError(
            f"no line {prefix!r} from delayq cluster up within {timeout_s}s; "
            f"stdout {self.lines!r}\n{self.logs()}"
        )

    # -- looking
    def address(self, shard: int) -> str:
        """The shard's master as the map said at start (``current_map()`` for now)."""
        assert self.map is not None
        return self.map.shards[shard].master

    def node_address(self, shard: int, node: int, key: str = "address") -> str:
        """Node ``node`` of ``shard`` (``node-K``), wherever the master is."""
        for n in self.state()["nodes"]:
            if n["shard"] == shard and n["node"] == f"node-{node}":
                return str(n[key])
        raise KeyError((shard, node))

    def admin_address(self, shard: int, node: int = 0) -> str:
        """Node ``node`` of ``shard``'s admin service."""
        return self.node_address(shard, node, "admin_address")

    def current_map(self) -> ShardMap:
        return parse((self.dir / "shards.json").read_text())

    def record(self, shard: int) -> dict[str, Any]:
        """The supervisor's record of ``shard`` (epoch, master, insync, failovers, stuck)."""
        for r in self.state()["shards"]:
            if r["shard"] == shard:
                return dict(r)
        raise KeyError(shard)

    def wait_record(
        self, shard: int, ok: Callable[[dict[str, Any]], bool], timeout_s: float = 30
    ) -> dict[str, Any]:
        """The shard's record once ``ok`` says so; AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(ValueError, OSError):  # (read while being replaced)
                rec = self.record(shard)
                if ok(rec):
                    return rec
            if time.monotonic() > deadline:
                raise AssertionError(f"shard {shard}: record {self.record(shard)}\n{self.logs()}")
            time.sleep(0.05)

    def wait_insync(self, shard: int, size: int, timeout_s: float = 30) -> dict[str, Any]:
        return self.wait_record(shard, lambda r: len(r["insync"]) >= size, timeout_s)

    def state(self) -> dict[str, Any]:
        """``DIR/cluster.json`` as it is now."""
        doc: dict[str, Any] = json.loads((self.dir / "cluster.json").read_text())
        return doc

    def node_pid(self, shard: int, node: int = 0) -> int:
        for n in self.state()["nodes"]:
            if n["shard"] == shard and n["node"] == f"node-{node}":
                return int(n["pid"])
        raise KeyError((shard, node))

    def status(self) -> dict[str, Any]:
        """``delayq cluster status --json``, parsed (whatever its exit code)."""
        run = cluster_cli("status", "--dir", str(self.dir), "--json")
        assert run.returncode in (0, 1), run.stderr
        doc: dict[str, Any] = json.loads(run.stdout)
        return doc

    def kill(self, shard: int, node: int = 0, sig: int = signal.SIGKILL) -> int:
        """Signal a node's process; return its pid once the supervisor has seen it
        exit (``cluster.json`` no longer names it)."""
        pid = self.node_pid(shard, node)
        assert pid, f"shard {shard} node {node} is not running"
        os.kill(pid, sig)
        deadline = time.monotonic() + 30
        while self.node_pid(shard, node) == pid:
            assert time.monotonic() < deadline, f"the supervisor did not see {pid} exit"
            time.sleep(0.02)
        return pid

    def wait_serving(self, timeout_s: float = 30) -> dict[str, Any]:
        """The status once every node serves; AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            doc = self.status()
            if all(n["state"] == "serving" for n in doc["nodes"]):
                return doc
            if time.monotonic() > deadline:
                raise AssertionError(f"not every node serves: {doc}\n{self.logs()}")
            time.sleep(0.1)

    def explain(self, shard: int, ids: list[str]) -> dict[str, Any]:
        """What every node of ``shard`` says now, for a failure message: the record,
        each node's role, epochs and positions (admin ``Status``), and each of
        ``ids`` looked up on each node (its state there, or the error)."""
        nodes = [n for n in self.state()["nodes"] if n["shard"] == shard]
        out: dict[str, Any] = {"record": self.record(shard), "nodes": {}, "ids": {}}
        for n in nodes:
            name = n["node"]
            with grpc.insecure_channel(n["admin_address"]) as ch:
                try:
                    st = arpc.ShardAdminStub(ch).Status(apb.StatusRequest(), timeout=5)
                    out["nodes"][name] = {
                        "role": st.role,
                        "epoch": st.epoch,
                        "fenced": st.fenced,
                        "log_end": st.log_end,
                        "flushed": st.flushed,
                        "high_water": st.high_water,
                        "insync": list(st.insync),
                        "epochs": [[e.epoch, e.start] for e in st.epochs],
                        "failovers": st.failovers,
                    }
                except grpc.RpcError as exc:
                    out["nodes"][name] = f"{exc.code().name}: {exc.details()}"
            with grpc.insecure_channel(n["address"]) as ch:
                stub = rpc.DelayQueueStub(ch)
                for mid in ids:
                    try:
                        r = stub.Lookup(pb.LookupRequest(id=mid), timeout=5)
                        seen = f"{pb.MessageState.Name(r.state)} due {r.deliver_at_ms}"
                    except grpc.RpcError as exc:
                        seen = f"{exc.code().name}: {exc.details()}"
                    out["ids"].setdefault(mid, {})[name] = seen
        return out

    def log_records(self) -> list[dict[str, Any]]:
        """The supervisor's JSON log lines."""
        out = []
        for line in self.supervisor_log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def logs(self, tail: int = 20) -> str:
        """The supervisor's, every node's and the rebalance job's last log lines (for
        failure messages; the job's longer: a JVM's reason comes before pyspark's
        traceback)."""
        parts = []
        job = self.dir / "rebalance.log"
        for path in [self.supervisor_log, *sorted(self.dir.glob("shard-*/node-*.log")), job]:
            with contextlib.suppress(OSError):
                lines = path.read_text().splitlines()[-(tail * 4 if path == job else tail) :]
                parts.append(f"--- {path.name if path == self.supervisor_log else path}\n")
                parts.append("\n".join(lines) + "\n")
        return "".join(parts)
