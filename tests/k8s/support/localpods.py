"""Helpers for DelayTopics whose pods run as real processes on the local node
(``tests/k8s/support/kubelet.py``): the topic, waiting for it, its status and shard
map, pod addresses, the in-cluster client (``tests/k8s/support/incluster.py``),
and an operator run as in the cluster (``in_cluster_operator``)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from delayq import shardmap
from delayq_operator import spec as topic_spec
from tests.k8s.support.kube import Kube, OperatorProcess, operator_pod_args
from tests.k8s.support.kubelet import LocalKubelet, pod_selector

TOPIC = "delayq.io/topic"


def local_topic(name: str, **spec: Any) -> dict[str, Any]:
    """A DelayTopic whose pods land on the local node."""
    return {
        "apiVersion": "delayq.io/v1alpha1",
        "kind": "DelayTopic",
        "metadata": {"name": name},
        "spec": {"storage": {"size": "1Gi"}, **pod_selector(), **spec},
    }


def wait_serving(kube: Kube, ns: str, name: str, shards: int) -> None:
    def ready() -> bool:
        s = (kube.get("dt", name, ns) or {}).get("status") or {}
        return bool(s.get("readyShards") == f"{shards}/{shards}" and s.get("phase") == "Ready")

    kube.wait_for(f"{name}: {shards} shard(s) ready", ready, timeout_s=90)


def status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    obj = kube.get("dt", name, ns)
    return dict((obj or {}).get("status") or {})


def wait_ready(
    kube: Kube, ns: str, name: str, shards: int, timeout_s: float = 90
) -> dict[str, Any]:
    """Status once the operator has applied the current generation and all
    ``shards`` are ready (what ``kubectl wait`` users check)."""

    def ready() -> dict[str, Any] | None:
        obj = kube.get("dt", name, ns) or {}
        s = dict(obj.get("status") or {})
        applied = s.get("observedGeneration") == obj.get("metadata", {}).get("generation")
        done = s.get("phase") == "Ready" and s.get("readyShards") == f"{shards}/{shards}"
        return s if applied and done else None

    return dict(kube.wait_for(f"{name} Ready with {shards} shards", ready, timeout_s))


def read_map(kube: Kube, ns: str, name: str) -> shardmap.ShardMap:
    """The topic's shard map as the API server holds it, read by the server's parser."""
    return shardmap.parse(kube.get("configmap", f"{name}-shard-map", ns)["data"]["shards.json"])


def pod(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict(kube.get("pod", name, ns) or {})


def address(kube: Kube, ns: str, name: str) -> str:
    p = pod(kube, ns, name)
    return f"{p['status']['podIP']}:{topic_spec.PORT_DEFAULT}"


def run_client(
    kubelet: LocalKubelet, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``tests.k8s.support.incluster`` run in the cluster (``env``: added to the test's)."""
    argv = [sys.executable, "-m", "tests.k8s.support.incluster", *args]
    return kubelet.run_in_cluster(argv, env=env)


def client(kubelet: LocalKubelet, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = run_client(kubelet, *args, env=env)
    assert proc.returncode == 0, (
        f"{proc.stderr[-3000:]}\nhosts:\n{kubelet.hosts.read_text()}\n"
        f"kubelet errors: {kubelet.errors[-1:]}"
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def control_env(kube: Kube, ns: str, where: Path | None = None) -> dict[str, str]:
    """``DELAYQ_TLS_*`` of a client with the namespace's control certificate (the
    operator's keepers'), written to files under ``where`` (default: a new
    temporary directory): it may call the admin ports of the namespace's topics
    that use the operator's certificates; their public ports speak plaintext."""
    obj = kube.get("secret", "delayq-control-tls", ns)
    assert obj is not None, f"no delayq-control-tls in {ns}"
    where = where or Path(tempfile.mkdtemp(prefix="delayq-control-"))
    where.mkdir(parents=True, exist_ok=True)
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (where / key).write_bytes(base64.b64decode(obj["data"][key]))
    return {
        "DELAYQ_TLS_CA": str(where / "ca.crt"),
        "DELAYQ_TLS_CERT": str(where / "tls.crt"),
        "DELAYQ_TLS_KEY": str(where / "tls.key"),
        "DELAYQ_TLS_PUBLIC": "false",
    }


@contextmanager
def in_cluster_operator(
    kube: Kube, kubelet: LocalKubelet, logs: Path, prefix: str
) -> Iterator[str]:
    """A namespace of its own (``<prefix>-<pid>``, outside the session operator's
    ``dq-*``) and an operator watching it that runs as in the cluster: the pods'
    DNS names resolve, so it can call the topics' public ports (the consumer
    groups' and the DelaySchedules' rounds). Yields the namespace."""
    ns = f"{prefix}-{os.getpid()}"
    kube.kubectl("create", "namespace", ns)
    log = logs / f"operator-{ns}.log"
    argv = [sys.executable, "-m", "delayq_operator.main", "--standalone", "--namespace", ns,
            *operator_pod_args()]  # fmt: skip
    env = {"KUBECONFIG": str(kube.kubeconfig), "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            kubelet.in_cluster_command(argv, env), stdout=out, stderr=subprocess.STDOUT
        )
    op = OperatorProcess(proc, log)
    try:
        yield ns
    finally:
        op.stop()
        print(f"--- operator log tail ---\n{op.tail()}")  # (shown when the test failed)
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
