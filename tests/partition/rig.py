"""A replicated shard in network namespaces, its queue workload and its watchers,
for the network-fault tests (``netfaults.Net``).

Members: ``cp`` (``delayq cluster up``: the supervisor and its failover loop),
``client`` (``bench.queuecheck`` as a program: producer, canceller, consumer
through the routing client), ``n0``..``n2`` (the shard's nodes, placed there by
``--placement``). The control plane's connections to the nodes' admin ports go
through its relay, so a nemesis can slow them. The observer (this process)
samples every node's ``delayq_delivering`` every ``SAMPLE_S`` over a path no
fault cuts, and reads the supervisor's log for when each epoch was recorded.

``Findings`` holds the checker's counts (``bench.queuecheck.check``) and the two
invariants: no acknowledgement of epoch e whose call was sent after epoch e+1
was recorded, and never two nodes delivering in one sample.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.queuecheck import History, check

from delayq.ids import MessageId
from tests.support.cluster import LocalCluster
from tests.support.netfaults import Net
from tests.support.servers import ROOT

NODES = ("n0", "n1", "n2")
MEMBERS = ("cp", "client", *NODES)
BASE_PORT = 7600  # (every node has its own address: the same ports in every run)
LEASE_MS = 1000
PROBE_MS = 100
SAMPLE_S = 0.03


def _port(k: int, which: int) -> int:
    """Node k's port: 0 gRPC, 1 metrics, 2 admin (``cluster.layout``)."""
    return BASE_PORT + 3 * k + which


@dataclass
class Findings:
    nemesis: str
    counts: dict[str, Any]
    acked: int
    late_acks: list[str]
    """Ids acknowledged on a call sent after a later epoch was recorded."""
    max_ack_after_record_ms: int
    """The latest an acknowledgement of epoch e arrived after e+1 was recorded."""
    two_deliverers: list[tuple[float, list[int]]]
    longest_unwritable_ms: int
    """The longest time without any acknowledged schedule."""
    epochs: dict[int, float] = field(default_factory=dict)
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
        self, tmp: Path, *, replication: str = "sync", ahead_s: dict[str, float] | None = None
    ) -> None:
        """``ahead_s``: nodes whose wall clock runs that many seconds ahead
        (libfaketime; their monotonic clock is left alone)."""
        self.tmp = tmp
        self.replication = replication
        self.ahead_s = ahead_s or {}
        self.net = Net(MEMBERS)
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
            f"shard-0/node-{k}": {"host": net.address(n), "launcher": self._launcher(n)}
            for k, n in enumerate(NODES)
        }
        path = self.tmp / "placement.json"
        path.write_text(json.dumps(placement))
        for k, n in enumerate(NODES):
            net.relay("cp", n, [_port(k, 2)])
        self.cluster = LocalCluster(
            self.tmp / "c",
            shards=1,
            replicas=3,
            base_port=BASE_PORT,
            args=(
                *("--replication", self.replication),
                *("--lease", f"{LEASE_MS}ms", "--probe-interval", f"{PROBE_MS}ms"),
                *("--placement", str(path)),
            ),
            command=(*net.exec_prefix("cp"), sys.executable, "-m", "delayq.cli.main",
                     "cluster", "up"),
        ).start()  # fmt: skip
        self.cluster.wait_insync(0, 3, timeout_s=60)
        self._sampling.set()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        self.load = subprocess.Popen(
            [*net.exec_prefix("client"), sys.executable, "-m", "bench.queuecheck",
             "--address", f"{net.address('n1')}:{_port(1, 0)}",
             "--stop-file", str(self.stop_file), "--out", str(self.history_file),
             "--ready-file", str(self.ready_file)],
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
    def master(self) -> str:
        """The recorded master's member name."""
        assert self.cluster is not None
        return f"n{int(self.cluster.record(0)['master'].removeprefix('node-'))}"

    def pid(self, member: str) -> int:
        assert self.cluster is not None
        return self.cluster.node_pid(0, NODES.index(member))

    def pause(self, member: str, on: bool) -> None:
        """SIGSTOP (``on``) or SIGCONT a node's process."""
        os.kill(self.pid(member), signal.SIGSTOP if on else signal.SIGCONT)

    def admin_port(self, member: str) -> int:
        return _port(NODES.index(member), 2)

    # -- the end
    def finish(self, nemesis: str, timeout_s: float = 180) -> Findings:
        """Heal, drain, stop the workload; the findings."""
        assert self.load is not None and self.cluster is not None
        self.net.heal()
        for n in NODES:
            self.net.delay("cp", n, 0)
        self.cluster.wait_insync(0, 3, timeout_s=60)
        self.stop_file.write_text("")
        assert self.load.wait(timeout_s) == 0, "the workload failed"
        self._sampling.clear()
        if self._sampler is not None:
            self._sampler.join()
        history = History.from_json(self.history_file.read_text())
        return self._findings(nemesis, history)

    def _findings(self, nemesis: str, h: History) -> Findings:
        assert self.cluster is not None
        recorded: dict[int, float] = {}
        for r in self.cluster.log_records():
            if "promoting" in str(r.get("msg", "")) and "epoch" in r:
                recorded.setdefault(int(r["epoch"]), float(r["ts"]) * 1000)
        late, worst = [], 0
        for mid, sent in h.acked_sent.items():
            epoch = MessageId.parse(mid).epoch
            after = [t for e, t in recorded.items() if e > epoch]
            if not after:
                continue
            if sent > min(after):
                late.append(mid)
            worst = max(worst, int(h.acked_at[mid] - min(after)))
        two = [(t, [i for i, d in enumerate(ds) if d == 1]) for t, ds in self.samples]
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
        while self._sampling.is_set():
            at = time.time()
            self.samples.append((at, [self._delivering(k) for k in range(len(NODES))]))
            time.sleep(SAMPLE_S)

    def _delivering(self, k: int) -> int | None:
        url = f"http://{self.net.address(NODES[k])}:{_port(k, 1)}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=0.2) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("delayq_delivering "):
                        return int(float(line.split()[1]))
        except OSError:
            return None
        return None
