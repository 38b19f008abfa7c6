"""End-to-end benchmark: ``delayq serve`` processes (one, or a cluster of
``--cluster-shards N`` reading one shard map), driven over gRPC by the Python
client, 200-byte bodies, batches of 100, async flush.

Figures (``--json FILE`` writes them with these names):
  schedule_msgs_per_s    Schedule calls of 100 from several client threads
  deliver_msgs_per_s     due messages received and acked by consumers (batches of 1000)
  lateness_ms_p50/p99/max, early_count   consumer-observed (receive time - due time)
                         at ~5k deliveries/s
  rtt_ms_p50/p99         one-message Schedule round trip
  {schedule,deliver}_{client,server}_cpu_us_per_msg
                         CPU seconds per message of the benchmark process (the
                         clients) and of all server processes together, per phase
                         (the deliver phase includes scheduling its messages)
  {schedule,deliver}_msgs_per_s_per_server_core
                         1e6 / server CPU µs per message: what one core of server
                         processes sustains, to size a real cluster
``--quick`` shrinks everything to finish in under a minute. With several shards
keyless batches go to one shard per call in turn, and consumers fan in from all.
``--tls`` serves TLS on both ports (a throwaway CA, no client certificates) and the
clients dial over it: the cost of TLS, against a run without. ``--scrape-every S``
runs a real Prometheus (``bench.prometheus``) scraping the server's /metrics every
S seconds throughout: the cost of being watched, against a run without
(``bench.scrape`` pairs the two). ``--group-policy`` sets the consumers' group a
delivery policy whose limits are never reached (attempts, an exponential backoff,
a rate and an in-flight limit far above what is handed out): the cost of
enforcing one on the deliver path, against a run without. ``--keys unique`` gives
every message of the schedule phase a key of its own with ``if_exists="reject"``
(each one checked against the shard's key index and entered in it): the cost of
scheduling once per key, against ``--keys none`` (the default, keyless) and
``--keys routed`` (the same keys without ``if_exists``: what carrying a key costs
apart from the check) on the same machine (with several shards a keyed batch is
also split by the keys' shards).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.lateness import lateness_figures
from bench.prometheus import PrometheusProcess
from bench.systems import free_port, spawn_delayq, stop_process
from delayq import Backoff, BackoffKind, Client, GroupPolicy, Outgoing
from delayq.cluster.certs import LOCAL_HOSTS, issue, new_ca
from delayq.shardmap import ShardMap
from delayq.tls import TlsConfig

BODY = b"e" * 200
UNREACHED = GroupPolicy(
    max_attempts=16,
    backoff=Backoff(kind=BackoffKind.EXPONENTIAL, initial_ms=1000, max_ms=60_000),
    rate_per_s=1_000_000.0,
    burst=1_000_000,
    max_in_flight=10_000_000,
)
"""``--group-policy``: every part enforced, no limit reached by the benchmark."""
_TLS: TlsConfig | None = None
"""``--tls``: how the clients dial (the throwaway CA), set once by ``main``."""


def _client(address: str) -> Client:
    return Client(address, tls=_TLS)


def _tls_files(root: Path) -> tuple[list[str], TlsConfig]:
    """A throwaway CA and node certificate under ``root``: the server options and
    the clients' settings (TLS without client certificates on the public port)."""
    ca = new_ca("bench CA")
    (root / "ca.crt").write_bytes(ca.cert)
    issue(ca, "node", hosts=LOCAL_HOSTS, server=True, client=True).write(
        root / "node.crt", root / "node.key"
    )
    args = ["--tls-cert", str(root / "node.crt"), "--tls-key", str(root / "node.key")]
    return [*args, "--admin-client-ca", str(root / "ca.crt")], TlsConfig(ca=root / "ca.crt")


def _parallel(n: int, fn: Any) -> None:
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _all_accepted(out: list[Any]) -> None:
    """Stop on a refused message, saying why (a benchmark of a partial load is void)."""
    refused = [o.error for o in out if not o.ok]
    if refused:
        raise RuntimeError(f"{len(refused)} of a batch of {len(out)} refused: {refused[0]}")


def warm_up(address: str) -> None:
    """One batch through the client, then a second's rest, before anything is
    measured: what a client loads on its first batch (numpy, lazily, whose OpenBLAS
    threads then spin for a while before they sleep) is a cost of starting, not of
    each message, and in a phase of well under a second it would read as one
    (+1 to +2 µs of client CPU a message)."""
    with _client(address) as c:
        _all_accepted(c.schedule_many([Outgoing(topic="warm", body=BODY, delay=3600.5)] * 2))
    time.sleep(1.0)


def bench_schedule(address: str, total: int, threads: int, keys: str = "none") -> float:
    """Schedule msgs/s; ``keys`` ``"routed"``: each message its own key;
    ``"unique"``: that, scheduled once per key (``if_exists="reject"``)."""
    per = total // threads

    def work(i: int) -> None:
        rng = random.Random(i)
        n = 0
        with _client(address) as c:
            for _ in range(per // 100):
                batch = [
                    Outgoing(topic="far", body=BODY, delay=rng.uniform(3600, 86400))
                    for _ in range(100)
                ]
                if keys != "none":
                    mode = "reject" if keys == "unique" else None
                    for m in batch:
                        m.key, m.if_exists = f"t{i}-{n}", mode
                        n += 1
                _all_accepted(c.schedule_many(batch))

    t0 = time.perf_counter()
    _parallel(threads, work)
    return per * threads / (time.perf_counter() - t0)


def _consume(address: str, topic: str, expect: int, threads: int, late: list[int]) -> float:
    """Receive + ack ``expect`` messages; returns seconds from start to the last."""
    lock = threading.Lock()
    got = [0]
    done_at = [0.0]  # when the last expected message arrived (idle long-polls after it don't count)
    t0 = time.perf_counter()
    deadline = time.time() + 120

    def work(_: int) -> None:
        with _client(address) as c:
            while time.time() < deadline:
                with lock:
                    if got[0] >= expect:
                        return
                msgs = c.receive(topic, "bench", max_messages=1000, wait_s=0.5)
                now_ms = time.time() * 1000
                if not msgs:
                    continue
                c.ack(topic, "bench", [m.receipt for m in msgs])
                with lock:
                    got[0] += len(msgs)
                    late.extend(round(now_ms - m.deliver_at_ms) for m in msgs)
                    if got[0] >= expect and not done_at[0]:
                        done_at[0] = time.perf_counter()

    _parallel(threads, work)
    if got[0] < expect:
        raise SystemExit(f"only {got[0]} of {expect} messages arrived")
    return done_at[0] - t0


def bench_deliver(address: str, total: int, threads: int) -> float:
    """All ``total`` due at once; consumers drain them."""
    due = int(time.time() * 1000) + 3000
    with _client(address) as c:
        for i in range(0, total, 100):
            _all_accepted(
                c.schedule_many(
                    [Outgoing(topic="burst", body=BODY, at=due) for _ in range(min(100, total - i))]
                )
            )
    time.sleep(max(0.0, due / 1000 - time.time()) + 0.5)
    return total / _consume(address, "burst", total, threads, [])


def bench_lateness(address: str, rate: int, seconds: int) -> dict[str, float]:
    total = rate * seconds
    start = int(time.time() * 1000) + 3000
    rng = random.Random(5)
    dues = sorted(start + rng.randint(0, seconds * 1000) for _ in range(total))
    with _client(address) as c:
        for i in range(0, total, 100):
            c.schedule_many([Outgoing(topic="steady", body=BODY, at=d) for d in dues[i : i + 100]])
    late: list[int] = []
    _consume(address, "steady", total, 2, late)
    return lateness_figures(sorted(late))


def single_schedules_ms(address: str, calls: int, topic: str = "rtt") -> list[float]:
    """Latencies (ms) of ``calls`` one-message Schedules, one after the other."""
    samples = []
    with _client(address) as c:
        for _ in range(calls):
            t0 = time.perf_counter()
            c.schedule(topic, BODY, delay=3600)
            samples.append((time.perf_counter() - t0) * 1000)
    return samples


def bench_rtt(address: str, calls: int) -> dict[str, float]:
    samples = sorted(single_schedules_ms(address, calls))
    return {
        "rtt_ms_p50": round(samples[len(samples) // 2], 3),
        "rtt_ms_p99": round(samples[int(len(samples) * 0.99)], 3),
    }


def _proc_cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


class CpuMeter:
    """CPU used by this process (the clients) and by the servers across a phase."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def __enter__(self) -> CpuMeter:
        self._client0, self._server0 = time.process_time(), _proc_cpu_s(self.pids)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client_s = time.process_time() - self._client0
        self.server_s = _proc_cpu_s(self.pids) - self._server0

    def figures(self, phase: str, messages: int) -> dict[str, float]:
        server_us = self.server_s * 1e6 / messages
        return {
            f"{phase}_client_cpu_us_per_msg": round(self.client_s * 1e6 / messages, 2),
            f"{phase}_server_cpu_us_per_msg": round(server_us, 2),
            f"{phase}_msgs_per_s_per_server_core": round(1e6 / server_us) if server_us else 0,
        }


def spawn_cluster(root: Path, shards: int, *extra: str) -> tuple[list[Any], str]:
    """``shards`` nodes on fixed free ports, each serving its shard of one map file;
    returns the processes and the first node's address."""
    ports = [free_port() for _ in range(shards)]
    shard_map = ShardMap.of_masters([f"127.0.0.1:{p}" for p in ports])
    map_file = root / "shards.json"
    map_file.write_text(shard_map.dumps())
    procs = []
    for i, port in enumerate(ports):
        args = ("--listen", f"127.0.0.1:{port}", "--shard", str(i), "--shard-map", str(map_file))
        procs.append(spawn_delayq(root / f"shard-{i}", *extra, *args)[0])
    return procs, shard_map.shards[0].master


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument(
        "--cluster-shards",
        type=int,
        default=0,
        metavar="N",
        help="run N shards (a shard map of N nodes) instead of one node serving alone",
    )
    ap.add_argument(
        "--tls",
        action="store_true",
        help="serve TLS (a throwaway CA; no client certificates) and dial over it",
    )
    ap.add_argument(
        "--scrape-every",
        type=float,
        default=0,
        metavar="S",
        help="a real Prometheus scrapes the server's /metrics every S seconds (one node only)",
    )
    ap.add_argument(
        "--group-policy",
        action="store_true",
        help="the consumers' group has a delivery policy whose limits are never reached",
    )
    ap.add_argument(
        "--keys",
        choices=("none", "routed", "unique"),
        default="none",
        help="routed: every scheduled message has a key of its own; unique: that, scheduled "
        "once per key (if_exists reject); none (default): keyless",
    )
    a = ap.parse_args()
    if a.scrape_every and a.cluster_shards:
        ap.error("--scrape-every watches one node: not with --cluster-shards")
    sizes = (
        dict(schedule=60_000, deliver=50_000, rate=5000, seconds=4, rtt=300)
        if a.quick
        else dict(schedule=600_000, deliver=300_000, rate=5000, seconds=20, rtt=2000)
    )
    root = Path(tempfile.mkdtemp(prefix="delayq-e2e-"))
    # The deliver phase puts all its messages in one wheel slot: more than the default
    # slot limit (250,000), which refuses the rest as Congested once the link stage
    # keeps up with the producers. Raised here so that they are all due at once.
    extra = ["--slot-limit", "1000000"]
    if a.tls:
        global _TLS
        tls_args, _TLS = _tls_files(root)
        extra += tls_args
    watcher: PrometheusProcess | None = None
    if a.scrape_every:
        metrics = f"127.0.0.1:{free_port()}"
        extra += ["--metrics-listen", metrics]
        targets = root / "targets.json"
        targets.write_text(json.dumps([{"targets": [metrics], "labels": {"shard": "0"}}]))
        watcher = PrometheusProcess(root / "prometheus", targets=targets, scrape_s=a.scrape_every)
    if a.cluster_shards:
        procs, address = spawn_cluster(root, a.cluster_shards, *extra)
    else:
        proc, address = spawn_delayq(root / "data", *extra)
        procs = [proc]
    cpu = CpuMeter([p.pid for p in procs])
    figures: dict[str, Any] = {
        "shards": max(1, a.cluster_shards),
        "tls": a.tls,
        "scrape_every_s": a.scrape_every,
        "group_policy": a.group_policy,
        "keys": a.keys,
    }
    try:
        if watcher is not None:
            watcher.start().wait_targets_up(1)
        warm_up(address)
        if a.group_policy:
            with _client(address) as c:
                for topic in ("burst", "steady"):
                    c.set_group_policy(topic, "bench", UNREACHED)
        with cpu:
            figures["schedule_msgs_per_s"] = round(
                bench_schedule(address, sizes["schedule"], 4, a.keys)
            )
        figures.update(cpu.figures("schedule", sizes["schedule"]))
        print(f"schedule: {figures['schedule_msgs_per_s']} msgs/s", file=sys.stderr)
        with cpu:
            figures["deliver_msgs_per_s"] = round(bench_deliver(address, sizes["deliver"], 6))
        figures.update(cpu.figures("deliver", sizes["deliver"]))
        print(f"deliver: {figures['deliver_msgs_per_s']} msgs/s", file=sys.stderr)
        figures.update(bench_lateness(address, sizes["rate"], sizes["seconds"]))
        figures.update(bench_rtt(address, sizes["rtt"]))
    finally:
        if watcher is not None:
            figures["scrapes"] = watcher.scrapes()
            watcher.stop()
        for p in procs:
            stop_process(p)
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
