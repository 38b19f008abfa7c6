"""The rebalance on real processes and real Spark: a 2-shard ``delayq cluster``
with 20,000 pending messages (1,000,000 with ``--long``, or
``DELAYQ_REBALANCE_MESSAGES``; keyed and keyless,
some cancelled, far-future ones rolling every two minutes, some due while the job runs)
is scaled 2 -> 3 (the job SIGKILLed midway, then run again) and 3 -> 2 with
``delayq cluster scale``, while a producer (keyed and keyless), a canceller and
a consumer keep running. Then:

- every acknowledged, uncancelled message of the live load is delivered, none
  early, none by two shards (the total-queue check), and the producer saw no
  error;
- every message due during the job is delivered, by one shard;
- every pending message is pending exactly once (an export of every shard), keys
  on their jump-hash owner among the 2 shards;
- old ids (of messages moved once, twice, or off the removed shard) still look up
  and cancel.

The same scale-up also runs on a Spark standalone master + worker.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from bench.queuecheck import QueueLoad, check

import delayq
from delayq import shardmap
from delayq.ids import MessageId
from delayq.receipts import Receipt
from tests.spark.standalone import StandaloneSpark
from tests.spark.workload import exported
from tests.support.cluster import LocalCluster, cluster_cli, running_cluster_cli
from tests.support.sizes import size

MESSAGES = size("DELAYQ_REBALANCE_MESSAGES", ci=20_000, long=1_000_000)
NODE_ENV = {
    "DELAYQ_WINDOW": "120s",  # far-future messages roll every two minutes
    "DELAYQ_PRECISION": "100ms",
    "DELAYQ_FLUSH_INTERVAL": "200ms",
    "DELAYQ_SPARK_MASTER": "local[2]",
}
HOUR_MS = 3_600_000


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    for key, value in NODE_ENV.items():
        monkeypatch.setenv(key, value)
    with LocalCluster(tmp_path / "cluster", shards=2) as c:
        yield c


class Population:
    """The messages scheduled before the scaling, by body (unique)."""

    def __init__(self) -> None:
        self.ids: dict[bytes, str] = {}
        self.keys: dict[bytes, str] = {}
        self.soon: set[bytes] = set()  # due while the job runs
        self.cancelled: set[bytes] = set()

    def pending(self) -> set[bytes]:
        return set(self.ids) - self.soon - self.cancelled


def populate(client: delayq.Client, n: int) -> Population:
    p = Population()
    now = int(time.time() * 1000)
    batch: list[delayq.Outgoing] = []
    for i in range(n):
        body = b"p-%d" % i
        key = f"c{i % 20_000}" if i % 10 < 7 else ""
        if i % 50 == 0:
            due = now + 30_000 + (i * 60_000) // n  # during the job
            p.soon.add(body)
        else:
            due = now + HOUR_MS + (i * 30 * 24 * HOUR_MS) // n  # rolls
        p.keys[body] = key
        batch.append(delayq.Outgoing(topic="p", body=body, key=key, at=due))
        if len(batch) == 5_000 or i == n - 1:
            for m, out in zip(batch, client.schedule_many(batch), strict=True):
                assert out.ok and out.id is not None, out.error
                p.ids[m.body] = out.id
            batch = []
    gone = [b for b in p.ids if int(b[2:]) % 20 == 1 and b not in p.soon]
    for start in range(0, len(gone), 5_000):
        part = gone[start : start + 5_000]
        assert client.cancel(*(p.ids[b] for b in part)) == ["cancelled"] * len(part)
    p.cancelled = set(gone)
    return p


class Receiver:
    """Receives topic ``p`` (group ``r``), acking, recording each body's shards."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.got: dict[bytes, set[int]] = {}
        self.early = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="receiver")

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with delayq.Client(self.address, timeout_s=5) as c:
            while not self._stop.is_set():
                try:
                    got = c.receive("p", "r", max_messages=500, wait_s=0.3)
                    if got:
                        c.ack("p", "r", [m.receipt for m in got])
                except Exception:
                    time.sleep(0.1)
                    continue
                for m in got:
                    self.got.setdefault(m.body, set()).add(Receipt.shards([m.receipt])[0])
                    self.early += m.delivered_at_ms < m.deliver_at_ms


def job_processes(cluster: LocalCluster) -> list[psutil.Process]:
    """This cluster's rebalance jobs (``--server`` one of its masters): other tests
    may run jobs of their own meanwhile."""
    servers = {s.master for s in cluster.current_map().shards}
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        job = "delayq_spark.main" in cmd and "rebalance" in cmd and "--server" in cmd
        if job and cmd[cmd.index("--server") + 1] in servers:
            out.append(proc)
    return out


def kill_the_job_once_it_moves(
    cluster: LocalCluster, timeout_s: float = 300, moved: Callable[[], bool] | None = None
) -> None:
    """SIGKILL the rebalance job (and its JVM) once the new shard holds messages (or
    once ``moved`` says so, asked while the map has the new shard)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = cluster.current_map()
        if m.count == 3:
            if moved is not None:
                if moved():
                    break
            else:
                answer = shard_stats(m.shards[2].master)
                if answer is not None and sum(t["pending"] for t in answer["topics"]) > 0:
                    break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the job moved nothing within {timeout_s}s\n{cluster.logs()}")
    for proc in job_processes(cluster):
        # a short-lived child (or the job itself) may end between the listing and
        # its kill: gone is as good as killed
        with contextlib.suppress(psutil.NoSuchProcess):
            children = proc.children(recursive=True)
            for child in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.send_signal(signal.SIGKILL)
            proc.send_signal(signal.SIGKILL)


def shard_stats(address: str) -> dict[str, object] | None:
    from delayq.cluster import probe

    return probe.stats(address)


def scale_to_3(cluster: LocalCluster) -> list[str]:
    return ["--dir", str(cluster.dir), "--shards", "3"]


def scale(cluster: LocalCluster, shards_: int) -> subprocess.CompletedProcess[str]:
    return cluster_cli("scale", "--dir", str(cluster.dir), "--shards", str(shards_), timeout_s=900)


def say(what: str, t0: float = time.monotonic()) -> None:
    print(f"[{time.monotonic() - t0:7.1f}s] {what}", flush=True)


@pytest.mark.long
@pytest.mark.timeout(1800)  # three Spark jobs; a loaded 2-core machine takes its time
def test_scale_up_and_down_under_load(cluster: LocalCluster) -> None:
    say("cluster up")
    address = cluster.address(0)
    with delayq.Client(address, timeout_s=30) as client:
        pop = populate(client, MESSAGES)
    say(f"populated {MESSAGES}")
    load = QueueLoad(address, topic="live", keys=50, delay_s=(0.5, 4.0)).start()
    try:
        with Receiver(address) as receiver:
            # 2 -> 3, the job killed once it moved some; the map stays as it was
            with running_cluster_cli("scale", *scale_to_3(cluster)) as running:
                kill_the_job_once_it_moves(cluster)
                say("job killed")
                out, err = running.communicate(timeout=120)
            assert running.returncode == 1, (out, err)
            assert "rebalance job failed" in err, err
            assert cluster.current_map().owners == 2, "no switch on a failed job"
            again = scale(cluster, 3)
            say("scaled to 3")
            assert again.returncode == 0, (again.stdout, again.stderr, cluster.logs())
            m = cluster.current_map()
            assert (m.count, m.owners) == (3, 3)
            with delayq.Client(address, timeout_s=30) as client:
                later = client.schedule_many(
                    [
                        delayq.Outgoing(topic="p", body=b"r-%d" % i, key=f"r{i}", delay=7_200)
                        for i in range(600)
                    ]
                )
            on_two = {
                o.id: b"r-%d" % i
                for i, o in enumerate(later)
                if o.id and MessageId.parse(o.id).shard == 2
            }
            assert on_two, "some land on the new shard"
            time.sleep(3)
            # 3 -> 2: the new shard drained and removed
            down = scale(cluster, 2)
            say("scaled to 2")
            assert down.returncode == 0, (down.stdout, down.stderr, cluster.logs())
            m = cluster.current_map()
            assert (m.count, m.owners) == (2, 2)
            assert (cluster.dir / f"shard-2.removed-{m.topology_epoch}").is_dir()
            time.sleep(3)
            load.drain()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not pop.soon <= set(receiver.got):
                time.sleep(0.5)
    finally:
        load.stop()
    say("drained")
    findings = check(load.history)
    say(f"findings {findings}")
    assert findings["lost"] == 0, findings
    assert findings["early"] == 0 and findings["cancel_broken"] == 0, findings
    assert findings["two_shards"] == 0, findings
    assert load.history.unknown == 0 and not load.history.errors, findings
    say("checked the load")
    missing = pop.soon - set(receiver.got)
    assert not missing, f"{len(missing)} due during the job never came"
    assert all(len(s) == 1 for s in receiver.got.values()), "each from one shard"
    assert receiver.early == 0

    with delayq.Client(address, timeout_s=30) as client:
        # old ids: moved once or twice, or off the removed shard
        sample = sorted(pop.pending())[:: max(1, len(pop.pending()) // 300)]
        for body in sample:
            found = client.lookup(pop.ids[body])
            assert (found.state, found.body) == ("pending", body)
        removed = list(on_two.items())[:20]
        for mid, body in removed:
            assert client.lookup(mid).body == body, "a removed shard's id is searched"
        gone = sample[:50]
        assert client.cancel(*(pop.ids[b] for b in gone)) == ["cancelled"] * len(gone)
        assert client.cancel(removed[0][0]) == ["cancelled"]
        pop.cancelled |= set(gone)

    say("checked old ids")
    rows = exported(address)
    count = Counter(bytes(r["body"]) for r in rows if bytes(r["body"]).startswith(b"p-"))  # type: ignore[arg-type]
    want = pop.pending()
    assert set(count) == want, (len(set(count) - want), len(want - set(count)))
    assert max(count.values()) == 1, "pending exactly once"
    for r in rows:
        key = str(r["key"] or "")
        if key:
            assert r["shard"] == shardmap.shard_of_key(key, 2), (key, r["shard"])


def test_scale_up_on_a_standalone_spark_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, standalone_spark: StandaloneSpark
) -> None:
    """The same job, on a Spark master + worker started from pyspark's own
    distribution (``cluster scale`` passes ``DELAYQ_SPARK_MASTER`` on to it)."""
    for key, value in {**NODE_ENV, "DELAYQ_SPARK_MASTER": standalone_spark.master_url}.items():
        monkeypatch.setenv(key, value)
    with LocalCluster(tmp_path / "cluster", shards=2) as cluster:
        with delayq.Client(cluster.address(0), timeout_s=30) as client:
            pop = populate(client, 5_000)
        up = scale(cluster, 3)
        assert up.returncode == 0, (up.stdout, up.stderr, cluster.logs())
        assert "delayq-rebalance" in standalone_spark.apps(), "it ran on the cluster"
        rows = exported(cluster.address(0))
    bodies = Counter(bytes(r["body"]) for r in rows)  # type: ignore[arg-type]
    assert set(bodies) - pop.soon == pop.pending(), "(those due soon: pending or not yet)"
    assert max(bodies.values()) == 1
    for r in rows:
        if r["key"]:
            assert r["shard"] == shardmap.shard_of_key(str(r["key"]), 3)
    assert {r["shard"] for r in rows} == {0, 1, 2}
