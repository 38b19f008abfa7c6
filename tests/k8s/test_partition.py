"""The operator's shard keepers under a network partition: a sync DelayTopic of one
shard x 3 pods on the local node, its operator cut off from the master pod's
admin port (packets dropped by nftables, ``netfaults.GroupFaults``: the local
kubelet's pods share the host's network namespace, so the operator's sockets are
told apart by its group) for a few leases, then healed, twice, while the queue
workload (``bench.queuecheck``) runs in the cluster and every pod's
``delayq_delivering`` is sampled. The operator fails the master over, the old
master stops on its own lease, and after the heal and a drain nothing
acknowledged is lost, none early, no acknowledged cancel broken, never two pods
delivering at once."""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from bench.queuecheck import History, check

from tests.k8s.support.kube import Kube, start_operator
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.localpods import TOPIC, address, local_topic, pod, wait_serving
from tests.partition.rig import sample_round
from tests.support.netfaults import GroupFaults

pytestmark = [pytest.mark.partition, pytest.mark.timeout(600)]

NAME, PODS = "parted", 3
LEASE_MS = 1000
ADMIN_PORT, METRICS_PORT = 7422, 7421


def _record(kube: Kube, ns: str) -> dict[str, Any]:
    s = (kube.get("dt", NAME, ns) or {}).get("status") or {}
    return dict((s.get("replication") or {}).get("0") or {})


def _settled(kube: Kube, ns: str) -> dict[str, Any] | None:
    rec = _record(kube, ns)
    return rec if rec.get("inOffice") and len(rec.get("insync") or []) == PODS else None


def test_an_operator_cut_off_from_the_master_pod_fails_over_and_loses_nothing(
    kube: Kube, control_plane: Any, kubelet: LocalKubelet, tmp_path: Path
) -> None:
    ns = f"parted-{os.getpid()}"  # outside the session operator's dq-* namespaces
    kube.kubectl("create", "namespace", ns)
    faults = GroupFaults()
    op = start_operator(
        kube.kubeconfig,
        control_plane.logs / f"operator-{ns}.log",
        "--standalone", "--namespace", ns,
        "--lease-ms", str(LEASE_MS), "--probe-interval-ms", "100",
        launcher=tuple(faults.launcher()),
    )  # fmt: skip
    samples: list[list[int | None]] = []
    sampling = threading.Event()
    load = None
    try:
        kube.apply(local_topic(NAME, shards=1, replicasPerShard=PODS, replication="sync"), ns)
        wait_serving(kube, ns, NAME, 1)
        kube.wait_for("the shard settled", lambda: _settled(kube, ns), timeout_s=90)
        names = [f"{NAME}-shard-0-{k}" for k in range(PODS)]
        ips = {n: pod(kube, ns, n)["status"]["podIP"] for n in names}

        def sample() -> None:
            addresses = [f"{ip}:{METRICS_PORT}" for ip in ips.values()]
            with ThreadPoolExecutor(len(addresses)) as pool:
                while sampling.is_set():
                    if (values := sample_round(pool, addresses)) is not None:
                        samples.append(values)
                    time.sleep(0.03)

        sampling.set()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        stop, out, ready = tmp_path / "stop", tmp_path / "history.json", tmp_path / "ready"
        load = kubelet.start_in_cluster(
            [sys.executable, "-m", "bench.queuecheck",
             "--address", address(kube, ns, names[1]),
             "--stop-file", str(stop), "--out", str(out), "--ready-file", str(ready)]
        )  # fmt: skip
        kube.wait_for("the workload's first ack", ready.exists, timeout_s=60)
        for _ in range(2):
            rec = _settled(kube, ns) or {}
            master, epoch = rec["master"], rec["epoch"]
            faults.drop(ips[master], ADMIN_PORT)
            moved = kube.wait_for(
                "a failover away from the cut-off master",
                lambda m=master, e=epoch: (
                    r if (r := _record(kube, ns)).get("epoch", 0) > e and r["master"] != m
                    else None
                ),
                timeout_s=60,
            )  # fmt: skip
            assert moved["master"] != master
            time.sleep(LEASE_MS / 1000)
            faults.heal()
            kube.wait_for("the old master back in sync", lambda: _settled(kube, ns), timeout_s=90)
        stop.touch()
        _, err = load.communicate(timeout=180)
        assert load.returncode == 0, err[-2000:]
        sampling.clear()
        sampler.join()
        found = check(History.from_json(out.read_text()))
        print(f"\noperator cut off from the master twice: {found['acked']} acked, "
              f"{found['duplicates']} duplicates, {len(samples)} samples")  # fmt: skip
        assert (found["lost"], found["early"], found["cancel_broken"]) == (0, 0, 0), found
        assert found["acked"] > 0
        two = [s for s in samples if sum(1 for d in s if d == 1) > 1]
        assert two == [], f"two pods delivering at once in {len(two)} samples"
        labels = {p["metadata"]["name"] for p in kube.items("pods", ns, **{TOPIC: NAME})}
        assert labels == set(names)
    finally:
        sampling.clear()
        faults.heal()
        if load is not None and load.poll() is None:
            load.kill()
            load.communicate()
        op.stop()
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
