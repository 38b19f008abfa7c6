"""Helpers for the Kubernetes tests: kubectl and polling bound to a kubeconfig
(``Kube``), the cluster's fake nodes and volumes, and ``delayq-operator`` as a
real process (``start_operator``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.controlplane import BIN_DIR, require_binary

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "charts/delayq/crds/delaytopics.delayq.io.yaml"
RUNS = BIN_DIR.parent / "runs"
NODES = 3
VOLUMES = 40


@dataclass
class Kube:
    """kubectl and small polling helpers bound to one kubeconfig."""

    kubeconfig: Path

    def kubectl(
        self, *args: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [require_binary("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{proc.stderr}")
        return proc

    def apply(
        self, obj: dict[str, Any] | str, namespace: str | None = None, *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl apply`` of an object or YAML text (into ``namespace`` if given)."""
        text = obj if isinstance(obj, str) else yaml.safe_dump(obj)
        ns = ["-n", namespace] if namespace else []
        return self.kubectl("apply", *ns, "-f", "-", stdin=text, check=check)

    def get(self, kind: str, name: str = "", namespace: str | None = None, **sel: str) -> Any:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        if sel:
            args += ["-l", ",".join(f"{k}={v}" for k, v in sel.items())]
        proc = self.kubectl(*args, check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return None
            raise AssertionError(proc.stderr)
        return json.loads(proc.stdout)

    def items(self, kind: str, namespace: str, **sel: str) -> list[dict[str, Any]]:
        found = self.get(kind, namespace=namespace, **sel)
        return list(found["items"]) if found else []

    def wait_for(
        self, what: str, check: Callable[[], Any], timeout_s: float = 60.0, interval: float = 0.5
    ) -> Any:
        """Poll ``check`` until it returns something truthy; fail naming ``what``."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last: {last!r}")


def add_cluster_fixtures(kube: Kube) -> None:
    """Fake nodes (kwok) and classless hostPath volumes for the shards' claims
    (their paths in the run's directory: the local kubelet mounts them)."""
    pv_root = kube.kubeconfig.parent / "pv"
    docs = []
    for i in range(NODES):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"kwok-node-{i}",
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {"kubernetes.io/hostname": f"kwok-node-{i}", "type": "kwok"},
                },
            }
        )
    for i in range(VOLUMES):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"test-pv-{i}"},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": "",
                    "hostPath": {"path": str(pv_root / f"test-pv-{i}")},
                },
            }
        )
    kube.apply(yaml.safe_dump_all(docs))


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_operator(
    kubeconfig: Path, log: Path, *args: str, command: tuple[str, ...] = ("delayq_operator.main",)
) -> OperatorProcess:
    """``delayq-operator`` (or another ``python -m`` command) as a real process
    against ``kubeconfig``."""
    with open(log, "wb") as out:  # the child writes to its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", *command, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1"),
            cwd=ROOT,
        )
    return OperatorProcess(proc, log)
