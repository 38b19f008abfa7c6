"""A replicated shard in network namespaces, its queue workload and its watchers,
for the network-fault tests (``netfaults.Net``).

Members: ``cp`` (``delayq cluster up``: the supervisor and its failover loops),
``client`` (``bench.queuecheck`` as a program: producer, canceller, consumer
through the routing client), ``n0``, ``n1``... (node K of shard S is
``n{3S+K}``, placed there by ``--placement``; three nodes a shard), and the
test's ``extra`` members (e.g. ``rx``, a push receiver; ``env`` adds settings to
every node's environment, e.g. ``DELAYQ_PUSH_ALLOW``). The control
plane's connections to the nodes' admin ports go through its relay, so a nemesis
can slow them. The observer (this process)
samples every node's ``delayq_delivering`` at once every ``SAMPLE_S`` over a path
no fault cuts (a round slower than ``ROUND_S`` is not counted), and reads the
supervisor's log for when each epoch was recorded.

``Findings`` holds the checker's counts (``bench.queuecheck.check``) and the two
invariants, per shard: no acknowledgement of epoch e whose call was sent after
epoch e+1 was recorded, and never two nodes delivering in one sample.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.queuecheck import History, check

from delayq.ids import MessageId
from tests.support.cluster import PORTS_PER_NODE, LocalCluster
from tests.support.netfaults import Net
from tests.support.servers import ROOT

REPLICAS = 3
NODES = ("n0", "n1", "n2")
"""Shard 0's nodes."""
BASE_PORT = 7600  # (every node has its own address: the same ports in every run)
LEASE_MS = 1000
PROBE_MS = 100
SAMPLE_S = 0.06
"""Every node's whole /metrics is read a round: ~5 ms of a node's CPU each, so 9
nodes every 30 ms took over a core of the two here and starved the 1 s leases."""
ROUND_S = 0.15
"""A sample counts only when every node answered within this of the round's start:
a handover leaves at least the lease's margin (250 ms at a 1 s lease) between the
old master's last delivering moment and the new one's first, so two nodes seen
delivering within one such round did deliver at once (a slower round, on a
loaded machine, could straddle a correct handover)."""


def _port(j: int, which: int) -> int:
    """Node j's port (j = R*S + K): 0 gRPC, 1 metrics, 2 admin, 3 RocketMQ
    (``cluster.layout``)."""
    return BASE_PORT + PORTS_PER_NODE * j + which


@dataclass
class Findings:
    nemesis: str
    counts: dict[str, Any]
    acked: int
    late_acks: list[str]
    """Ids acknowledged on a call sent after a later epoch was recorded."""
    max_ack_after_record_ms: int
    """The latest an acknowledgement of epoch e arrived after e+1 was recorded."""
    two_deliverers: list[tuple[float, list[str]]]
    longest_unwritable_ms: int
    """The longest time without any acknowledged schedule."""
    epochs: dict[tuple[int, int], float] = field(default_factory=dict)
    """(shard, epoch) -> when it was recorded (ms)."""
    errors: dict[str, int] = field(default_factory=dict)
    """The workload's failed calls, by gRPC code."""

    def line(self) -> str:
        c = self.counts
        return (
            f"{self.nemesis}: acked {self.acked}, lost {c['lost']}, early {c['early']}, "
            f"broken cancels {c['cancel_broken']}, duplicates {c['duplicates']}, "
            f"recovered {c['recovered']}, acks sent after the next epoch "
            f"{len(self.late_acks)}, latest ack after the next epoch "
            f"{self.max_ack_after_record_ms} ms, two deliverers in "
            f"{len(self.two_deliverers)} samples, epochs {len(self.epochs)}, "
            f"longest without a write {self.longest_unwritable_ms} ms, errors {self.errors}"
        )


class Rig:
    def __init__(
        self,
        tmp: Path,
        *,
        replication: str = "sync",
        ahead_s: dict[str, float] | None = None,
        shards: int = 1,
        lease_ms: int = LEASE_MS,
        batch: int = 5,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        """``ahead_s``: nodes whose wall clock runs that many seconds ahead
        (libfaketime; their monotonic clock is left alone); ``batch``: messages a
        schedule call of the workload (about 10 calls a second); ``extra``: more
        members (namespaces) for the test's own processes; ``env``: added to the
        nodes' environment."""
        self.tmp = tmp
        self.replication = replication
        self.ahead_s = ahead_s or {}
        self.shards = shards
        self.lease_ms = lease_ms
        self.batch = batch
        self.nodes = [f"n{j}" for j in range(shards * REPLICAS)]
        self.env = dict(env or {})
        self.net = Net(["cp", "client", *self.nodes, *extra])
        self.cluster: LocalCluster | None = None
        self.load: subprocess.Popen[bytes] | None = None
        self.samples: list[tuple[float, list[int | None]]] = []
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None
        self.stop_file = tmp / "stop"
        self.history_file = tmp / "history.json"
        self.ready_file = tmp / "ready"

    # -- life
    def __enter__(self) -> Rig:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        net = self.net.start()
        placement = {
            f"shard-{j // REPLICAS}/node-{j % REPLICAS}": {
                "host": net.address(n),
                "launcher": self._launcher(n),
            }
            for j, n in enumerate(self.nodes)
        }
        path = self.tmp / "placement.json"
        path.write_text(json.dumps(placement))
        for j, n in enumerate(self.nodes):
            net.relay("cp", n, [_port(j, 2)])
        self.cluster = LocalCluster(
            self.tmp / "c",
            shards=self.shards,
            replicas=REPLICAS,
            base_port=BASE_PORT,
            args=(
                *("--replication", self.replication),
                *("--lease", f"{self.lease_ms}ms", "--probe-interval", f"{PROBE_MS}ms"),
                *("--placement", str(path)),
            ),
            command=(*net.exec_prefix("cp"), sys.executable, "-m", "delayq.cli.main",
                     "cluster", "up"),
            env=self.env,
        ).start()  # fmt: skip
        self.wait_insync()
        self._sampling.set()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        self.load = subprocess.Popen(
            [*net.exec_prefix("client"), sys.executable, "-m", "bench.queuecheck",
             "--address", f"{net.address('n1')}:{_port(1, 0)}",
             "--stop-file", str(self.stop_file), "--out", str(self.history_file),
             "--ready-file", str(self.ready_file), "--batch", str(self.batch)],
            cwd=ROOT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not self.ready_file.exists():  # the workload has had its first ack
            assert self.load.poll() is None, "the workload ended before its first ack"
            assert time.monotonic() < deadline, "the workload had no ack in 60 s"
            time.sleep(0.05)

    def _launcher(self, node: str) -> list[str]:
        prefix = self.net.exec_prefix(node)
        if node not in self.ahead_s:
            return prefix
        found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
        assert found, "libfaketime is missing (make system-deps installs it)"
        return [*prefix, "env", f"LD_PRELOAD={found[0]}",
                f"FAKETIME=+{self.ahead_s[node]}s", "FAKETIME_DONT_FAKE_MONOTONIC=1"]  # fmt: skip

    def close(self) -> None:
        self._sampling.clear()
        if self._sampler is not None:
            self._sampler.join()
        if self.load is not None and self.load.poll() is None:
            self.load.kill()
            self.load.wait()
        if self.cluster is not None:
            self.cluster.stop()
        self.net.close()

    # -- what the nemeses need
    def shard_nodes(self, shard: int = 0) -> list[str]:
        return self.nodes[shard * REPLICAS : (shard + 1) * REPLICAS]

    def core(self, shard: int = 0) -> list[str]:
        """The control plane and the shard's nodes: what partitions split."""
        return ["cp", *self.shard_nodes(shard)]

    def master(self, shard: int = 0) -> str:
        """The recorded master's member name."""
        assert self.cluster is not None
        k = int(self.cluster.record(shard)["master"].removeprefix("node-"))
        return self.nodes[shard * REPLICAS + k]

    def wait_insync(self, timeout_s: float = 60) -> None:
        """Every shard's in-sync set is whole again."""
        assert self.cluster is not None
        for s in range(self.shards):
            self.cluster.wait_insync(s, REPLICAS, timeout_s=timeout_s)

    def public_address(self, member: str) -> str:
        """A node's gRPC address (reachable from this process, the observer)."""
        return f"{self.net.address(member)}:{_port(self.nodes.index(member), 0)}"

    def pid(self, member: str) -> int:
        assert self.cluster is not None
        j = self.nodes.index(member)
        return self.cluster.node_pid(j // REPLICAS, j % REPLICAS)

    def pause(self, member: str, on: bool) -> None:
        """SIGSTOP (``on``) or SIGCONT a node's process."""
        os.kill(self.pid(member), signal.SIGSTOP if on else signal.SIGCONT)

    # -- the end
    def finish(self, nemesis: str, timeout_s: float = 180) -> Findings:
        """Heal, drain, stop the workload; the findings."""
        assert self.load is not None and self.cluster is not None
        self.net.heal()
        for n in self.nodes:
            self.net.delay("cp", n, 0)
        self.wait_insync()
        self.stop_file.write_text("")
        assert self.load.wait(timeout_s) == 0, "the workload failed"
        self._sampling.clear()
        if self._sampler is not None:
            self._sampler.join()
        history = History.from_json(self.history_file.read_text())
        return self._findings(nemesis, history)

    def _findings(self, nemesis: str, h: History) -> Findings:
        assert self.cluster is not None
        recorded: dict[tuple[int, int], float] = {}
        for r in self.cluster.log_records():
            if "promoting" in str(r.get("msg", "")) and "epoch" in r:
                key = (int(r["shard"]), int(r["epoch"]))
                recorded.setdefault(key, float(r["ts"]) * 1000)
        late, worst = [], 0
        for mid, sent in h.acked_sent.items():
            m = MessageId.parse(mid)
            after = [t for (s, e), t in recorded.items() if s == m.shard and e > m.epoch]
            if not after:
                continue
            if sent > min(after):
                late.append(mid)
            worst = max(worst, int(h.acked_at[mid] - min(after)))
        two = [
            (
                t,
                [
                    n
                    for n, d in zip(self.shard_nodes(s), ds[s * REPLICAS :], strict=False)
                    if d == 1
                ],
            )
            for t, ds in self.samples
            for s in range(self.shards)
        ]
        acks = sorted(h.acked_at.values())
        gaps = [b - a for a, b in itertools.pairwise(acks)]
        return Findings(
            nemesis=nemesis,
            counts=check(h),
            acked=len(h.acked),
            late_acks=late,
            max_ack_after_record_ms=worst,
            two_deliverers=[x for x in two if len(x[1]) > 1],
            longest_unwritable_ms=int(max(gaps, default=0)),
            epochs=recorded,
            errors=dict(h.errors),
        )

    def _sample(self) -> None:
        addresses = [f"{self.net.address(n)}:{_port(j, 1)}" for j, n in enumerate(self.nodes)]
        with ThreadPoolExecutor(len(addresses)) as pool:
            while self._sampling.is_set():
                at = time.time()
                values = sample_round(pool, addresses)
                if values is not None:
                    self.samples.append((at, values))
                time.sleep(SAMPLE_S)


def sample_round(pool: ThreadPoolExecutor, addresses: list[str]) -> list[int | None] | None:
    """Every node's ``delayq_delivering`` read at once (None: the round took longer
    than ``ROUND_S``, so it does not count)."""
    began = time.monotonic()
    values = list(pool.map(delivering, addresses))
    return values if time.monotonic() - began <= ROUND_S else None


def delivering(metrics_address: str) -> int | None:
    """A node's ``delayq_delivering`` gauge (None: it did not answer within 80 ms,
    e.g. a paused process, so a round stays within ``ROUND_S``)."""
    try:
        with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=0.08) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("delayq_delivering "):
                    return int(float(line.split()[1]))
    except OSError:
        return None
    return None
