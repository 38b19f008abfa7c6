"""Session fixtures: a real control plane, fake nodes and volumes, the CRDs, and
the operator as a real ``delayq-operator`` process (with a client certificate of
the session's delayq CA, ``delayq_ca``, for topics with ``spec.tls``).

The session operator watches namespaces matching ``dq-*``; each test makes its
own namespace there. The Helm test runs a second operator, installed by the
chart and authenticated as the chart's ServiceAccount, in a namespace outside
that pattern.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.support.controlplane import FAKE_NODES, ControlPlane
from tests.k8s.support.kube import (
    CRD,
    RUNS,
    SCHEDULE_CRD,
    Kube,
    OperatorProcess,
    add_cluster_fixtures,
    operator_pod_args,
    start_operator,
)
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.podtls import DelayqCa


def _sweep_dead_runs() -> None:
    """Remove the directories of runs whose process is gone (a killed run leaves one)."""
    for run in RUNS.glob("run-*"):
        pid = run.name.removeprefix("run-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(run, ignore_errors=True)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    _sweep_dead_runs()
    root = RUNS / f"run-{os.getpid()}"
    cp = ControlPlane(root).start()
    try:
        yield cp
    finally:
        cp.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    k = Kube(control_plane.kubeconfig)
    add_cluster_fixtures(k)
    k.kubectl("apply", "--server-side", "-f", str(CRD), "-f", str(SCHEDULE_CRD))
    for crd in ("delaytopics", "delayschedules"):
        k.kubectl("wait", "--for=condition=Established", f"crd/{crd}.delayq.io", "--timeout=60s")
    k.wait_for(
        "fake nodes Ready",
        lambda: (
            sum(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (n.get("status") or {}).get("conditions", [])
                )
                for n in k.items("nodes", "", type="fake")
            )
            == FAKE_NODES
        ),
    )
    yield k
    k.close()


@pytest.fixture(scope="session")
def delayq_ca(control_plane: ControlPlane) -> DelayqCa:
    """The CA of the DelayTopics' TLS Secrets and of the operator's client certificate."""
    return DelayqCa.make(control_plane.root / "delayq-tls")


@pytest.fixture(scope="session")
def operator(
    kube: Kube, control_plane: ControlPlane, delayq_ca: DelayqCa
) -> Iterator[OperatorProcess]:
    op = start_operator(
        kube.kubeconfig,
        control_plane.logs / "operator.log",
        "--standalone",
        "--namespace",
        "dq-*",
        "--verbose",
        *delayq_ca.operator_args(),
        *operator_pod_args(),
    )
    yield op
    op.stop()


@pytest.fixture(scope="session")
def kubelet(kube: Kube, control_plane: ControlPlane) -> Iterator[LocalKubelet]:
    """The local node whose pods run as real processes (``tests/k8s/support/kubelet.py``)."""
    k = LocalKubelet(control_plane.kubeconfig, control_plane.root / "kubelet").start()
    yield k
    k.stop()


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
