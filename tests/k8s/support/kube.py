"""Helpers for the Kubernetes tests: kubectl and polling bound to a kubeconfig
(``Kube``), the cluster's volumes, and ``delayq-operator`` as a
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
from urllib.parse import urlencode

import yaml
from kubernetes.client import ApiClient
from kubernetes.config import new_client_from_config

from delayq_operator.netpolicy import OperatorPods
from tests.k8s.support.controlplane import BIN_DIR, require_binary

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "charts/delayq/crds/delaytopics.delayq.io.yaml"
SCHEDULE_CRD = ROOT / "charts/delayq/crds/delayschedules.delayq.io.yaml"
RUNS = BIN_DIR.parent / "runs"
VOLUMES = 80
"""hostPath PersistentVolumes made for the session: every pod's claim takes one, and a
released one is not reused (no deleter for hostPath here), so this bounds how many
pods the whole suite may start (about 50 now); too few and the later topics' pods
stay Pending ("no persistent volumes available for this claim")."""
OPERATOR_PODS = OperatorPods(
    namespace="delayq-system",
    labels={"app.kubernetes.io/name": "delayq-operator", "app.kubernetes.io/instance": "k8s-tests"},
)
"""What the session operator is told its pods are (the topics' NetworkPolicies
admit them to the admin port; it runs as a local process, not in a pod)."""


def operator_pod_args(pods: OperatorPods = OPERATOR_PODS) -> list[str]:
    labels = ",".join(f"{k}={v}" for k, v in pods.labels.items())
    return ["--pod-namespace", pods.namespace, "--pod-labels", labels]


RESOURCES = {
    "pod": ("api/v1", "pods", True),
    "pods": ("api/v1", "pods", True),
    "configmap": ("api/v1", "configmaps", True),
    "secret": ("api/v1", "secrets", True),
    "service": ("api/v1", "services", True),
    "pvc": ("api/v1", "persistentvolumeclaims", True),
    "events": ("api/v1", "events", True),
    "nodes": ("api/v1", "nodes", False),
    "statefulset": ("apis/apps/v1", "statefulsets", True),
    "deployment": ("apis/apps/v1", "deployments", True),
    "job": ("apis/batch/v1", "jobs", True),
    "cronjob": ("apis/batch/v1", "cronjobs", True),
    "dt": ("apis/delayq.io/v1alpha1", "delaytopics", True),
    "dsched": ("apis/delayq.io/v1alpha1", "delayschedules", True),
    "crd": ("apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "kopfpeering": ("apis/kopf.dev/v1", "kopfpeerings", True),
    "networkpolicy": ("apis/networking.k8s.io/v1", "networkpolicies", True),
}
"""The kinds ``Kube.get`` reads over the API itself (group/version, plural,
namespaced): what the tests poll, so they do not start a kubectl a poll."""


@dataclass
class Kube:
    """kubectl, reads and small polling helpers bound to one kubeconfig (``close``
    it: it keeps connections to the API server)."""

    kubeconfig: Path
    _api: ApiClient | None = None

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None

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
        """``kubectl get -o json``: an object, a list (``items``), or None when not found."""
        if kind in RESOURCES:
            return self._read(kind, name, namespace, sel)
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

    def _read(self, kind: str, name: str, namespace: str | None, sel: dict[str, str]) -> Any:
        group, plural, namespaced = RESOURCES[kind]
        path = f"/{group}/"
        if namespaced:
            path += f"namespaces/{namespace or 'default'}/"
        path += plural + (f"/{name}" if name else "")
        if sel:
            path += "?" + urlencode({"labelSelector": ",".join(f"{k}={v}" for k, v in sel.items())})
        if self._api is None:
            self._api = new_client_from_config(config_file=str(self.kubeconfig))
        resp = self._api.call_api(
            "GET",
            self._api.configuration.host + path,
            header_params={"Accept": "application/json"},
            _request_timeout=60,
        )
        data = resp.read()
        if resp.status == 404:
            return None
        if resp.status >= 400:
            raise AssertionError(f"GET {path}: {resp.status} {resp.reason}\n{data!r}")
        return json.loads(data)

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
    """Classless hostPath volumes for the shards' claims (their paths in the run's
    directory: the local kubelet mounts them)."""
    pv_root = kube.kubeconfig.parent / "pv"
    docs = []
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
    kubeconfig: Path,
    log: Path,
    *args: str,
    command: tuple[str, ...] = ("delayq_operator.main",),
    launcher: tuple[str, ...] = (),
) -> OperatorProcess:
    """``delayq-operator`` (or another ``python -m`` command) as a real process
    against ``kubeconfig``, started through ``launcher`` (a command prefix)."""
    with open(log, "wb") as out:  # the child writes to its own copy of the descriptor
        proc = subprocess.Popen(
            [*launcher, sys.executable, "-m", *command, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1"),
            cwd=ROOT,
        )
    return OperatorProcess(proc, log)
