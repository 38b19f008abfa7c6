"""Session fixtures: a real control plane, fake nodes and volumes, the CRD, and
the operator as a real ``delayq-operator`` process.

The session operator watches namespaces matching ``dq-*``; each test makes its
own namespace there. The Helm test runs a second operator, installed by the
chart and authenticated as the chart's ServiceAccount, in a namespace outside
that pattern.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.controlplane import BIN_DIR, ControlPlane, require_binary

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


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    root = RUNS / f"run-{os.getpid()}"
    cp = ControlPlane(root).start()
    try:
        yield cp
    finally:
        cp.stop()
    shutil.rmtree(root, ignore_errors=True)


def _cluster_fixtures(kube: Kube) -> None:
    """Fake nodes (kwok) and classless hostPath volumes for the shards' claims."""
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
                    "hostPath": {"path": f"/tmp/delayq-test-pv-{i}"},
                },
            }
        )
    kube.apply(yaml.safe_dump_all(docs))


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Kube:
    k = Kube(control_plane.kubeconfig)
    _cluster_fixtures(k)
    k.kubectl("apply", "--server-side", "-f", str(CRD))
    k.kubectl("wait", "--for=condition=Established", "crd/delaytopics.delayq.io", "--timeout=60s")
    k.wait_for(
        "kwok nodes Ready",
        lambda: all(
            any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n["status"].get("conditions", [])
            )
            for n in k.get("nodes")["items"]
        ),
    )
    return k


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


@pytest.fixture(scope="session")
def operator(kube: Kube, control_plane: ControlPlane) -> Iterator[OperatorProcess]:
    op = start_operator(
        kube.kubeconfig,
        control_plane.logs / "operator.log",
        "--standalone",
        "--namespace",
        "dq-*",
        "--verbose",
    )
    yield op
    op.stop()


@pytest.fixture
def namespace(
    kube: Kube, operator: OperatorProcess, request: pytest.FixtureRequest
) -> Iterator[str]:
    name = f"dq-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", name)
    yield name
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        print(f"--- operator log tail ---\n{operator.tail()}")
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{rep.when}", rep)
