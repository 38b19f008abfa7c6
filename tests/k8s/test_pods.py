"""DelayTopic pods as real ``delayq serve`` processes: the local kubelet
(``tests/k8s/support/kubelet.py``) runs the pods the scheduler puts on its node,
with their own command, env, volumes and security context."""

from __future__ import annotations

import copy
import json
from typing import Any

from delayq_operator import shardmaps, statefulset
from delayq_operator.spec import parse_spec
from tests.k8s.support.kube import Kube
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.localpods import TOPIC, address, client, local_topic, pod, wait_serving


def test_two_shards_serve_keyed_messages_from_one_pod_address(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    kube.apply(local_topic("orders", shards=2), namespace)
    wait_serving(kube, namespace, "orders", 2)
    pods = kube.items("pods", namespace, **{TOPIC: "orders"})
    assert {p["spec"]["nodeName"] for p in pods} == {"local-node-0"}
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    assert all(ip.startswith("127.1.") for ip in ips.values()), ips
    for p in pods:  # each process is its pod: its IP, its shard, its user
        rt = kubelet.runtime(namespace, p["metadata"]["name"])
        assert rt is not None and rt.containers[0].proc is not None
        with open(f"/proc/{rt.containers[0].proc.pid}/status") as f:
            uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
        assert uids == ["10001"] * 4
        plan = json.loads((rt.root / "delayq.plan.json").read_text())
        argv = plan["argv"]
        assert argv[:2] == ["delayq", "serve"]
        assert argv[argv.index("--listen") + 1] == f"{ips[p['metadata']['name']]}:7420"
        assert argv[argv.index("--advertise") + 1] == (
            f"{p['metadata']['name']}.{p['spec']['subdomain']}.{namespace}.svc:7420"
        )

    one = address(kube, namespace, "orders-shard-1-0")
    sent = client(kubelet, "schedule", one, "orders", "200", "1")
    assert sent["errors"] == [] and len(sent["ids"]) == 200
    assert sent["shards"] == [0, 1], "keyed messages went to both shards"
    got = client(kubelet, "receive", one, "orders", "billing", "200", "60")["received"]
    assert sorted(m["id"] for m in got) == sorted(sent["ids"]), "each exactly once"
    assert max(m["early_ms"] for m in got) <= 0, "none early"


def test_a_deleted_pod_comes_back_with_its_data(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    kube.apply(local_topic("keep", shards=1), namespace)
    wait_serving(kube, namespace, "keep", 1)
    name = "keep-shard-0-0"
    epoch = _in_office(kube, kubelet, namespace, name, above=0)
    first = pod(kube, namespace, name)
    sent = client(kubelet, "schedule", address(kube, namespace, name), "keep", "3", "3600")
    assert len(sent["ids"]) == 3
    old = kubelet.runtime(namespace, name)
    assert old is not None
    proc = old.containers[0].proc
    assert proc is not None

    # graceful: SIGTERM, the server stops within its grace, the pod goes away
    kube.kubectl("delete", "pod", name, "-n", namespace, "--wait=true")
    assert proc.wait(timeout=30) == 0, "the server stopped cleanly on SIGTERM"

    def recreated() -> dict[str, Any] | None:
        p = pod(kube, namespace, name)
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions", [])
        )
        new = p and p["metadata"]["uid"] != first["metadata"]["uid"]
        return p if new and ready else None

    second = kube.wait_for(f"{name} recreated and ready", recreated, timeout_s=60)
    assert second["status"]["podIP"] != first["status"]["podIP"]
    states = client(kubelet, "lookup", address(kube, namespace, name), *sent["ids"])["states"]
    assert states == ["pending"] * 3, "the recreated pod found its data"
    # a shard of one pod: it starts as a replica, and is its master again
    epoch = _in_office(kube, kubelet, namespace, name, above=epoch)

    # forced: the pod is gone at once, the process is SIGKILLed
    rt = kubelet.runtime(namespace, name)
    assert rt is not None and rt.containers[0].proc is not None
    proc = rt.containers[0].proc
    kube.kubectl("delete", "pod", name, "-n", namespace, "--grace-period=0", "--force")
    assert proc.wait(timeout=10) == -9
    kube.wait_for(
        f"{name} recreated again",
        lambda: (
            (p := pod(kube, namespace, name))
            and p["metadata"]["uid"] != second["metadata"]["uid"]
            and p.get("status", {}).get("podIP")
        ),
    )
    _in_office(kube, kubelet, namespace, name, above=epoch)


def _in_office(kube: Kube, kubelet: LocalKubelet, ns: str, name: str, *, above: int) -> int:
    """Wait until the keep topic's shard 0 has ``name`` in office as its master at an
    epoch above ``above``, and takes a write; its epoch."""

    def recorded() -> dict[str, Any] | None:
        status = (kube.get("dt", "keep", ns) or {}).get("status") or {}
        rec = (status.get("replication") or {}).get("0") or {}
        good = rec.get("inOffice") and rec.get("master") == name and rec["epoch"] > above
        return rec if good else None

    rec = kube.wait_for(f"{name} master in office above epoch {above}", recorded, timeout_s=90)
    sent = client(kubelet, "schedule", address(kube, ns, name), "keep", "1", "3600")
    assert len(sent["ids"]) == 1, "the pod takes writes as the shard's master"
    return int(rec["epoch"])


def test_a_read_only_data_volume_fails_with_the_servers_own_error(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    """The operator's own pod template, one thing wrong: /data mounted read-only.
    The server fails as on a real node; its last lines are the container's
    termination message; the pod is not ready and restarts with back-off."""
    body = {"metadata": {"name": "broken", "namespace": namespace, "uid": "0"}, "spec": {}}
    spec = parse_spec(local_topic("broken", tls={"mode": "disabled"}))  # no Secret here
    template = copy.deepcopy(statefulset.statefulset(body, spec, 0)["spec"]["template"])
    pod_spec = template["spec"]
    pod_spec["volumes"].append({"name": "data", "emptyDir": {}})
    for m in pod_spec["containers"][0]["volumeMounts"]:
        if m["name"] == "data":
            m["readOnly"] = True
    shard_map = shardmaps.shard_map(body, shardmaps.topology("broken", namespace, spec))
    del shard_map["metadata"]["ownerReferences"]  # no DelayTopic owns it here
    kube.apply(shard_map, namespace)
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "broken-0", "labels": template["metadata"]["labels"]},
            "spec": {**pod_spec, "hostname": "broken-0", "subdomain": "broken-shard-0-pods"},
        },
        namespace,
    )

    def crashed() -> dict[str, Any] | None:
        statuses = (pod(kube, namespace, "broken-0").get("status") or {}).get(
            "containerStatuses"
        ) or [{}]
        return statuses[0] if statuses[0].get("lastState", {}).get("terminated") else None

    try:
        status = kube.wait_for("broken-0's container terminated", crashed, timeout_s=60)
    except AssertionError:
        print(json.dumps(pod(kube, namespace, "broken-0").get("status"), indent=1))
        print("kubelet errors:", *kubelet.errors[-3:], sep="\n")
        raise
    terminated = status["lastState"]["terminated"]
    assert terminated["exitCode"] == 2 and terminated["reason"] == "Error"
    last = terminated["message"].splitlines()[-1]
    assert last.startswith("delayq serve: "), terminated["message"]
    assert "/data" in last and "Read-only file system" in last, last
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["restartCount"] == 1 and status["ready"] is False
    p = pod(kube, namespace, "broken-0")
    ready = {c["type"]: c["status"] for c in p["status"]["conditions"]}
    assert ready["Ready"] == "False" and p["status"]["phase"] == "Running"
