"""Seconds from ``kubectl apply`` of a DelayTopic to all its shards serving (status
Ready, every shard ready), on the Kubernetes tests' real control plane with the
pods as real processes on the local node (``tests/k8s/support``): the default
(the operator's CA issues the namespace's CA, the control certificate and the
topic's certificate first) against ``spec.tls.mode: disabled`` (no certificates:
what every topic did before), alternated in pairs, each topic in a namespace of
its own (so every default run pays for a new CA).

    python -m bench.k8s_apply [--pairs 3] [--shards 2] [--replicas 2]

Needs the test binaries (``make k8s-tools``); prints one line per run and the
medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
import uuid

from tests.k8s.support.controlplane import ControlPlane
from tests.k8s.support.kube import (
    CRD,
    RUNS,
    Kube,
    add_cluster_fixtures,
    operator_pod_args,
    start_operator,
)
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.localpods import local_topic

MODES = {"operator CA": {}, "disabled": {"tls": {"mode": "disabled"}}}


def _serving(kube: Kube, ns: str, name: str, shards: int) -> bool:
    s = (kube.get("dt", name, ns) or {}).get("status") or {}
    return bool(s.get("phase") == "Ready" and s.get("readyShards") == f"{shards}/{shards}")


def _once(kube: Kube, mode: str, shards: int, replicas: int) -> float:
    ns = f"dqb-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", ns)
    topic = local_topic("t", shards=shards, replicasPerShard=replicas, **MODES[mode])
    began = time.monotonic()
    kube.apply(topic, ns)
    kube.wait_for("serving", lambda: _serving(kube, ns, "t", shards), timeout_s=180, interval=0.1)
    took = time.monotonic() - began
    kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--replicas", type=int, default=2)
    args = p.parse_args()
    root = RUNS / f"bench-{os.getpid()}"
    cp = ControlPlane(root).start()
    kubelet = None
    op = None
    try:
        kube = Kube(cp.kubeconfig)
        add_cluster_fixtures(kube)
        kube.kubectl("apply", "--server-side", "-f", str(CRD))
        kube.kubectl("wait", "--for=condition=Established", "crd/delaytopics.delayq.io")
        kubelet = LocalKubelet(cp.kubeconfig, root / "kubelet").start()
        op = start_operator(
            kube.kubeconfig,
            cp.logs / "operator.log",
            "--standalone",
            "--namespace",
            "dqb-*",
            *operator_pod_args(),
        )
        took: dict[str, list[float]] = {m: [] for m in MODES}
        _once(kube, "disabled", args.shards, args.replicas)  # warm-up: imports, caches
        for pair in range(args.pairs):
            order = list(MODES) if pair % 2 == 0 else list(reversed(MODES))
            for mode in order:
                t = _once(kube, mode, args.shards, args.replicas)
                took[mode].append(t)
                print(f"pair {pair + 1} {mode:12s} apply -> serving {t:6.2f} s", flush=True)
        shape = f"{args.shards} shard(s) x {args.replicas} pod(s)"
        for mode, runs in took.items():
            print(f"{mode:12s} {shape}: median {statistics.median(runs):.2f} s, runs {runs}")
        diffs = [a - b for a, b in zip(took["operator CA"], took["disabled"], strict=True)]
        print(f"added by the certificates (paired): median {statistics.median(diffs):+.2f} s")
    finally:
        if op is not None:
            op.stop()
        if kubelet is not None:
            kubelet.stop()
        cp.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
