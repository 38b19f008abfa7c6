"""Operator-driven replication and failover with real shard processes: a sync
DelayTopic of 2 shards x 3 pods on the local node (``tests/k8s/support/kubelet.py``),
the operator's shard keepers probing the pods through the admin API.

The kill loop's size is 3 kills over both shards (10 with ``--long``, or
``DELAYQ_K8S_KILLS``); it prints each failover's figures (SIGKILL to promotion
recorded, SIGKILL to the first write acknowledged again on that shard) and their
median and maximum.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.support.kube import Kube
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.localpods import TOPIC, address, client, local_topic, pod, wait_serving
from tests.support.sizes import size

KILLS = size("DELAYQ_K8S_KILLS", ci=3, long=10)
PROMOTE_WITHIN_S = 10.0
NAME = "orders"
SHARDS, PODS = 2, 3


def status(kube: Kube, ns: str) -> dict[str, Any]:
    return dict((kube.get("dt", NAME, ns) or {}).get("status") or {})


def record(kube: Kube, ns: str, shard: int) -> dict[str, Any]:
    return dict((status(kube, ns).get("replication") or {}).get(str(shard)) or {})


def settled(kube: Kube, ns: str, shard: int) -> dict[str, Any] | None:
    """Shard ``shard``'s record once its master is in office, every pod is in its
    in-sync set (the record's and the status row's) and ready (so the next
    failover has every candidate)."""
    rec = record(kube, ns, shard)
    if not rec.get("inOffice") or len(rec.get("insync") or []) < PODS:
        return None
    rows = [r for r in status(kube, ns).get("shards") or [] if r.get("index") == shard]
    if not rows or len(rows[0].get("inSync") or []) < PODS:
        return None  # the status rows follow the record within a daemon round (5 s)
    for p in kube.items("pods", ns, **{TOPIC: NAME, "delayq.io/shard": str(shard)}):
        conds = {c["type"]: c["status"] for c in (p.get("status") or {}).get("conditions", [])}
        if conds.get("Ready") != "True" or p["metadata"].get("deletionTimestamp"):
            return None
    return rec


def events(kube: Kube, ns: str) -> list[tuple[str, str]]:
    items = kube.get("events", namespace=ns)["items"]
    return [
        (e["reason"], e["message"])
        for e in sorted(items, key=lambda e: e.get("lastTimestamp") or "")
        if e["involvedObject"]["kind"] == "DelayTopic"
    ]


def master_process_pid(kubelet: LocalKubelet, ns: str, name: str) -> int:
    rt = kubelet.runtime(ns, name)
    assert rt is not None and rt.containers[0].proc is not None
    return rt.containers[0].proc.pid


@pytest.fixture(scope="module")
def topic(kube: Kube, operator: Any, kubelet: LocalKubelet) -> Iterator[tuple[str, float]]:
    """The sync topic, serving: (namespace, seconds from apply to all shards
    serving with every pod in sync)."""
    ns = f"dq-fo-{os.getpid()}"
    kube.kubectl("create", "namespace", ns)
    began = time.monotonic()
    kube.apply(local_topic(NAME, shards=SHARDS, replicasPerShard=PODS, replication="sync"), ns)
    wait_serving(kube, ns, NAME, SHARDS)
    serving_s = time.monotonic() - began
    for shard in range(SHARDS):
        kube.wait_for(f"shard {shard} settled", lambda s=shard: settled(kube, ns, s), timeout_s=60)
    print(f"\nkubectl apply -> all {SHARDS} shards serving: {serving_s:.2f} s")
    yield ns, serving_s
    kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_sync_topic_serves_keyed_messages_exactly_once_from_any_pod(
    kube: Kube, kubelet: LocalKubelet, topic: tuple[str, float]
) -> None:
    ns, _ = topic
    pods = kube.items("pods", ns, **{TOPIC: NAME})
    assert len(pods) == SHARDS * PODS
    for p in pods:  # six real processes, each serving
        rt = kubelet.runtime(ns, p["metadata"]["name"])
        assert rt is not None and rt.containers[0].proc is not None
        assert rt.containers[0].proc.poll() is None
    s = status(kube, ns)
    assert (s["phase"], s["readyShards"], s["masters"]) == ("Ready", "2/2", 2)
    for row in s["shards"]:
        i = row["index"]
        # (a new node opens its log in epoch 1: the founding promotion goes above it)
        assert row["master"] == f"{NAME}-shard-{i}-0" and row["epoch"] == 2, row
        assert row["inSync"] == [f"{NAME}-shard-{i}-{r}" for r in range(PODS)]
        assert row["failovers"] == 0 and row["ready"] is True
    labels = {p["metadata"]["name"]: p["metadata"]["labels"]["delayq.io/role"] for p in pods}
    assert sorted(n for n, r in labels.items() if r == "master") == [
        f"{NAME}-shard-0-0",
        f"{NAME}-shard-1-0",
    ]
    founded = [m for r, m in events(kube, ns) if r == "Promoted"]
    assert len(founded) == 2 and all("a new shard" in m for m in founded), founded

    replica = address(kube, ns, f"{NAME}-shard-1-2")  # any pod: here a replica's
    sent = client(kubelet, "schedule", replica, NAME, "5000", "3")
    assert sent["errors"] == [] and len(sent["ids"]) == 5000
    assert sent["shards"] == [0, 1]
    got = client(kubelet, "receive", replica, NAME, "billing", "5000", "90")["received"]
    ids = [m["id"] for m in got]
    assert len(ids) == len(set(ids)) == 5000, "each exactly once"
    assert set(ids) == set(sent["ids"])
    assert max(m["early_ms"] for m in got) <= 0, "none early"


def _start_load(kubelet: LocalKubelet, ns: str, kube: Kube, stop: Path) -> Any:
    entry = address(kube, ns, f"{NAME}-shard-0-1")
    return kubelet.start_in_cluster(
        [sys.executable, "-m", "tests.k8s.support.incluster", "load", entry, NAME, str(stop)]
    )


def _finish_load(proc: Any, stop: Path) -> dict[str, Any]:
    stop.touch()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    return dict(json.loads(out.strip().splitlines()[-1]))


def _first_ack_after(found: dict[str, Any], shard: int, t_ms: int) -> int | None:
    times = found["ack_times"].get(str(shard)) or []
    return next((t for t in times if t > t_ms), None)


@pytest.mark.long
def test_killed_masters_fail_over_under_load_with_nothing_lost(
    kube: Kube, kubelet: LocalKubelet, topic: tuple[str, float], tmp_path: Path
) -> None:
    ns, _ = topic
    stop = tmp_path / "stop"
    load = _start_load(kubelet, ns, kube, stop)
    kills: list[dict[str, Any]] = []
    try:
        time.sleep(3)
        for k in range(KILLS):
            shard = k % SHARDS
            rec = kube.wait_for(
                f"shard {shard} settled before kill {k + 1}",
                lambda s=shard: settled(kube, ns, s),
                timeout_s=90,
            )
            master, epoch = rec["master"], rec["epoch"]
            os.kill(master_process_pid(kubelet, ns, master), signal.SIGKILL)
            t0 = time.time()

            def promoted(s: int = shard, e: int = epoch) -> dict[str, Any] | None:
                r = record(kube, ns, s)
                return r if r.get("epoch", 0) > e and r.get("inOffice") else None

            new = kube.wait_for(f"shard {shard} promoted", promoted, timeout_s=30)
            promote_s = time.time() - t0
            assert new["master"] != master and new["epoch"] == epoch + 1
            assert new["failovers"] >= 1
            kills.append(
                {"shard": shard, "master": master, "epoch": epoch, "t0_ms": int(t0 * 1000),
                 "promote_s": promote_s, "new": new["master"]}
            )  # fmt: skip
            # the killed pod's process comes back and rejoins as a replica
            kube.wait_for(
                f"{master} back in shard {shard}'s in-sync set",
                lambda s=shard, m=master: m in (record(kube, ns, s).get("insync") or []),
                timeout_s=90,
            )
            assert pod(kube, ns, master)["metadata"]["labels"]["delayq.io/role"] == "replica"
        time.sleep(3)
    finally:
        found = _finish_load(load, stop)
    back = []
    for kill in kills:
        first = _first_ack_after(found, kill["shard"], kill["t0_ms"])
        assert first is not None, f"no write acknowledged on shard {kill['shard']} after {kill}"
        kill["writes_s"] = (first - kill["t0_ms"]) / 1000
        back.append(kill["writes_s"])
        print(
            f"kill: shard {kill['shard']} master {kill['master']} (epoch {kill['epoch']}) -> "
            f"{kill['new']}: promoted {kill['promote_s']:.2f} s, "
            f"writes acked again {kill['writes_s']:.2f} s"
        )
    promote = [k["promote_s"] for k in kills]
    print(
        f"{len(kills)} kills: promotion median {statistics.median(promote):.2f} s, max "
        f"{max(promote):.2f} s; writes acked again median {statistics.median(back):.2f} s, "
        f"max {max(back):.2f} s; load: {found['acked']} acked, {found['received']} received, "
        f"{found['cancelled']} cancelled, {found['duplicates']} redelivered, "
        f"errors {found['errors']}"
    )
    assert max(promote) < PROMOTE_WITHIN_S, kills
    assert (found["lost"], found["early"], found["cancel_broken"]) == (0, 0, 0), (
        {k: v for k, v in found.items() if k != "ack_times"},
        kills,
    )
    assert found["acked"] > 1000
    told = events(kube, ns)
    reasons = [r for r, _ in told]
    assert reasons.count("MasterLost") >= KILLS and reasons.count("Promoted") >= 2 + KILLS
    rows = status(kube, ns)["shards"]
    assert sum(r["failovers"] for r in rows) == KILLS
    assert all(r.get("lastFailover") for r in rows)


def test_a_deleted_master_pod_hands_over_cleanly(
    kube: Kube, kubelet: LocalKubelet, topic: tuple[str, float], tmp_path: Path
) -> None:
    ns, _ = topic
    rec = kube.wait_for("shard 1 settled", lambda: settled(kube, ns, 1), timeout_s=90)
    stop = tmp_path / "stop"
    load = _start_load(kubelet, ns, kube, stop)
    try:
        time.sleep(2)
        t0 = time.time()
        kube.kubectl("delete", "pod", rec["master"], "-n", ns, "--wait=false")
        new = kube.wait_for(
            "shard 1 handed over",
            lambda: (
                (r := record(kube, ns, 1)).get("epoch", 0) > rec["epoch"]
                and r.get("inOffice")
                and r
            ),
            timeout_s=30,
        )
        print(f"graceful delete: promoted in {time.time() - t0:.2f} s")
        assert new["master"] != rec["master"]
        try:
            kube.wait_for("shard 1 settled again", lambda: settled(kube, ns, 1), timeout_s=120)
        except AssertionError:
            print("record:", record(kube, ns, 1), "\nevents:", events(kube, ns)[-8:])
            print("old master's log:", *list(kubelet.logs(ns, rec["master"]))[-30:], sep="\n")
            print("pod:", json.dumps(pod(kube, ns, rec["master"]).get("status"))[:1500])
            oplog = (kube.kubeconfig.parent / "logs" / "operator.log").read_text().splitlines()
            print(*[x[:300] for x in oplog if "shard 1" in x][-40:], sep="\n")
            raise
        time.sleep(2)
    finally:
        found = _finish_load(load, stop)
    assert (found["lost"], found["early"], found["cancel_broken"]) == (0, 0, 0), found
    times = [t for t in found["ack_times"]["1"] if t >= t0 * 1000 - 1000]
    gap = max(b - a for a, b in itertools.pairwise(times)) / 1000
    print(f"graceful delete: the longest pause in shard 1's acknowledged writes {gap:.2f} s")
