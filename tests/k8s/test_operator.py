"""The operator against a real kube-apiserver, controller-manager, scheduler and
fake nodes: DelayTopics become StatefulSets whose pods run as real ``delayq serve``
processes on the local node (``tests/k8s/support/kubelet.py``), the operator's shard
keepers give each shard a master, status follows them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from delayq import shardmap
from delayq_operator import parse_spec
from delayq_operator.netpolicy import network_policy
from tests.k8s.support.controlplane import ControlPlane
from tests.k8s.support.kube import OPERATOR_PODS, ROOT, Kube, start_operator
from tests.k8s.support.kubelet import LocalKubelet, pod_selector
from tests.k8s.support.localpods import address, client, local_topic, read_map, status, wait_ready

EXAMPLE = ROOT / "manifests/examples/delaytopic.yaml"
TOPIC = "delayq.io/topic"
ROLE = "delayq.io/role"


def test_no_credentials_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    """Neither in a pod nor with a kubeconfig: the operator says so and stops (kopf
    alone retried its start-up every minute, a traceback each time)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    env.update(KUBECONFIG=str(tmp_path / "none"), HOME=str(tmp_path))
    got = subprocess.run(
        [sys.executable, "-m", "delayq_operator.main", "--standalone"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 2, got.stderr
    assert got.stderr.startswith("delayq-operator: no Kubernetes credentials:"), got.stderr
    assert "Traceback" not in got.stderr


def record(kube: Kube, ns: str, name: str, shard: int = 0) -> dict[str, Any]:
    return dict((status(kube, ns, name).get("replication") or {}).get(str(shard)) or {})


def condition(kube: Kube, ns: str, name: str, type_: str) -> dict[str, Any] | None:
    for c in status(kube, ns, name).get("conditions", []):
        if c["type"] == type_:
            return dict(c)
    return None


def names(kube: Kube, kind: str, ns: str, name: str) -> set[str]:
    return {o["metadata"]["name"] for o in kube.items(kind, ns, **{TOPIC: name})}


def settled_map(kube: Kube, ns: str, name: str, shards: int) -> shardmap.ShardMap:
    """The topic's map once all ``shards`` serve and the map holds every shard's
    recorded master (the epoch the status recorded)."""
    wait_ready(kube, ns, name, shards)

    def settled() -> shardmap.ShardMap | None:
        m = read_map(kube, ns, name)
        s = status(kube, ns, name)
        recorded = [s["replication"][str(i)]["epoch"] for i in range(shards)]
        same = m.topology_epoch == s.get("topologyEpoch")
        return m if same and [e.epoch for e in m.shards] == recorded else None

    got: shardmap.ShardMap = kube.wait_for(f"{name}'s map settled", settled)
    return got


def test_crd_is_served_with_short_name_and_columns(kube: Kube) -> None:
    crd = kube.get("crd", "delaytopics.delayq.io")
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["names"]["shortNames"] == ["dt"]
    assert "status" in version["subresources"]
    cols = [c["name"] for c in version["additionalPrinterColumns"]]
    assert cols == [
        "Shards",
        "Ready",
        "Masters",
        "Replication",
        "Phase",
        "TLS",
        "Age",
        "Cert-Expiry",
    ]


def test_example_reconciles_to_running_shards_with_masters(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    # the pods meet the restricted Pod Security Standard: the API server admits them
    kube.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    example = yaml.safe_load(EXAMPLE.read_text())
    example["spec"].update(pod_selector())
    kube.apply(example, namespace)
    s = wait_ready(kube, namespace, "orders", 2)
    assert s["masters"] == 2
    # the founding promotions (epoch 2: above the epoch 1 a new node opens its log
    # in) are published into the map; the status shows the map's epoch from the
    # daemon's next round, which may come after the one that made the topic Ready
    s = kube.wait_for(
        "the founded map's epoch in the status",
        lambda: (st := status(kube, namespace, "orders")).get("topologyEpoch", 0) >= 2 and st,
        timeout_s=60,
    )
    assert s["observedGeneration"] == 1
    assert [row["master"] for row in s["shards"]] == ["orders-shard-0-0", "orders-shard-1-0"]
    assert names(kube, "statefulsets", namespace, "orders") == {"orders-shard-0", "orders-shard-1"}
    assert names(kube, "services", namespace, "orders") == {
        "orders-shard-0",
        "orders-shard-0-pods",
        "orders-shard-1",
        "orders-shard-1-pods",
    }
    assert names(kube, "configmaps", namespace, "orders") == {"orders-shard-map"}
    assert names(kube, "pdb", namespace, "orders") == {"orders-shard-0", "orders-shard-1"}
    sts = kube.get("statefulset", "orders-shard-1", namespace)
    assert sts["spec"]["replicas"] == 2
    assert sts["metadata"]["ownerReferences"][0]["kind"] == "DelayTopic"
    container = sts["spec"]["template"]["spec"]["containers"][0]
    probe = {"path": "/readyz", "port": "metrics", "scheme": "HTTP"}
    assert container["readinessProbe"]["httpGet"] == probe
    assert container["startupProbe"]["failureThreshold"] == 120  # kept by the API server
    assert container["resources"]["limits"]["memory"] == "512Mi"
    args = container["args"]
    assert args[args.index("--shard-map") + 1] == "/etc/delayq/shards.json"
    assert args[args.index("--admin-listen") + 1] == "0.0.0.0:7422"
    assert ("admin", 7422) in {(p["name"], p["containerPort"]) for p in container["ports"]}
    assert "DELAYQ_SHARD_MAP_FILE" not in {e["name"] for e in container["env"]}
    m = settled_map(kube, namespace, "orders", 2)
    assert (m.topic, m.count) == ("orders", 2)
    assert [e.epoch for e in m.shards] == [2, 2]
    assert m.masters() == tuple(
        f"orders-shard-{i}-0.orders-shard-{i}-pods.{namespace}.svc:7420" for i in range(2)
    ), "each shard's recorded master, by its pod's own address"
    assert m.shards[1].replicas == tuple(
        f"orders-shard-1-{r}.orders-shard-1-pods.{namespace}.svc:7420" for r in range(2)
    )
    assert m.shards[1].admin == f"orders-shard-1-0.orders-shard-1-pods.{namespace}.svc:7422"
    pods = kube.items("pods", namespace, **{TOPIC: "orders"})
    assert len(pods) == 4 and all(p["status"]["phase"] == "Running" for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} == {"local-node-0"}
    for pod in pods:  # as the StatefulSet controller made them from the template
        assert pod["spec"]["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "fsGroup": 10001,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert pod["spec"]["containers"][0]["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
    roles = {p["metadata"]["name"]: p["metadata"]["labels"][ROLE] for p in pods}
    assert roles == {
        "orders-shard-0-0": "master",
        "orders-shard-0-1": "replica",
        "orders-shard-1-0": "master",
        "orders-shard-1-1": "replica",
    }
    svc = kube.get("service", "orders-shard-0", namespace)
    assert svc["spec"]["selector"][ROLE] == "master"
    table = kube.kubectl("get", "dt", "-n", namespace).stdout
    head = ["NAME", "SHARDS", "READY", "MASTERS", "REPLICATION", "PHASE", "TLS", "AGE"]
    assert table.split("\n")[0].split() == head
    row = ["orders", "2", "2/2", "2", "async", "Ready", "operator"]
    assert table.split("\n")[1].split()[:7] == row
    wide = kube.kubectl("get", "dt", "-n", namespace, "-o", "wide").stdout
    assert wide.split("\n")[0].split()[-1] == "CERT-EXPIRY"
    for row in s["shards"]:
        assert (row["epoch"], row["failovers"], row["ready"]) == (2, 0, True)
    kube.wait_for(  # kopf posts events from a background queue
        "ShardsCreated and Promoted events",
        lambda: (
            {"ShardsCreated", "Promoted"} <= {e["reason"] for e in kube.items("events", namespace)}
        ),
    )


def test_a_map_deleted_by_hand_comes_back_above_the_recorded_epoch(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    """The servers keep the last good map and refuse one whose epoch went down: a
    map deleted by hand is rewritten (at the next reconcile) above the epoch the
    status recorded, with the shards that exist. (A change of spec.shards is a
    rebalance: tests/k8s/test_rebalance.py.)"""
    kube.apply(local_topic("lost", shards=2), namespace)
    first = settled_map(kube, namespace, "lost", 2)
    kube.kubectl("delete", "configmap", "lost-shard-map", "-n", namespace)
    kube.apply(local_topic("lost", shards=2, maxDelay="365d"), namespace)
    again = settled_map(kube, namespace, "lost", 2)
    assert again.count == 2 and again.topology_epoch > first.topology_epoch
    assert again.masters() == first.masters() and again.owners == 2


def test_the_compaction_cronjob_follows_spec_compaction_schedule(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    """Only the CronJob object is checked: ``delayq-spark compact`` is another
    change's (its schedules here are never due during the test)."""
    yearly = {"schedule": "0 3 1 1 *"}
    kube.apply(local_topic("cron", shards=1, compaction=yearly), namespace)
    cron = kube.wait_for(
        "the compaction CronJob", lambda: kube.get("cronjob", "cron-compact", namespace)
    )
    assert cron["spec"]["schedule"] == "0 3 1 1 *"
    assert cron["metadata"]["ownerReferences"][0]["name"] == "cron"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[:3] == ["compact", "--server", f"cron-shard-0.{namespace}.svc:7420"]
    assert pod["restartPolicy"] == "Never"
    kube.apply(local_topic("cron", shards=1, compaction={"schedule": "@monthly"}), namespace)
    kube.wait_for(
        "the schedule updated",
        lambda: kube.get("cronjob", "cron-compact", namespace)["spec"]["schedule"] == "@monthly",
    )
    kube.apply(local_topic("cron", shards=1), namespace)
    kube.wait_for(
        "the CronJob deleted", lambda: kube.get("cronjob", "cron-compact", namespace) is None
    )
    bad = local_topic("cron", shards=1, compaction={"schedule": "daily"})
    proc = kube.apply(bad, namespace, check=False)
    assert proc.returncode != 0 and "spec.compaction.schedule" in proc.stderr, proc.stderr


def test_the_network_policy_follows_spec_network_policy(kube: Kube, namespace: str) -> None:
    """The NetworkPolicy as the API server accepted and stores it (a 1-shard topic;
    its pods need not run). No network plugin here enforces NetworkPolicies (the
    local kubelet's pods share the host's network), so only the object is checked;
    what it admits is checked by the pure tests (tests/operator/test_operator_netpolicy.py)."""
    kube.apply(local_topic("fenced", shards=1), namespace)

    def live() -> dict[str, Any] | None:
        got = kube.get("networkpolicy", "fenced-shards", namespace)
        return None if got is None else dict(got)

    def expected(**spec: Any) -> dict[str, Any]:
        body = kube.get("dt", "fenced", namespace)
        body["spec"].update(spec)
        policy = network_policy(body, parse_spec(body), OPERATOR_PODS)
        assert policy is not None
        return dict(policy["spec"])

    first = kube.wait_for("the NetworkPolicy", live)
    assert first["metadata"]["ownerReferences"][0]["name"] == "fenced"
    assert first["spec"] == expected()
    admin = first["spec"]["ingress"][0]
    assert admin["ports"] == [{"protocol": "TCP", "port": 7422}]
    assert admin["from"][0]["podSelector"]["matchLabels"] == OPERATOR_PODS.labels
    clients = [{"podSelector": {"matchLabels": {"role": "client"}}}]
    prometheus = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    changed = {"networkPolicy": {"publicFrom": clients, "metricsFrom": prometheus}}
    kube.apply(local_topic("fenced", shards=1, **changed), namespace)
    want = expected(**changed)
    kube.wait_for("the NetworkPolicy updated", lambda: (live() or {}).get("spec") == want)
    kube.apply(local_topic("fenced", shards=1, networkPolicy={"enabled": False}), namespace)
    kube.wait_for("the NetworkPolicy deleted", lambda: live() is None)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"shards": 0}, "spec.shards"),
        ({"replicasPerShard": 6}, "spec.replicasPerShard"),
        (
            {"replication": "sync", "replicasPerShard": 1},
            "sync replication needs at least one replica besides the master",
        ),
        ({"wheelWindow": "two days"}, "spec.wheelWindow"),
        ({"replication": "eventually"}, "spec.replication"),
    ],
)
def test_invalid_specs_are_refused_by_the_api_server(
    kube: Kube, namespace: str, spec: dict[str, Any], message: str
) -> None:
    proc = kube.apply(local_topic("bad", **spec), namespace, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert kube.get("dt", "bad", namespace) is None


def test_the_metrics_port_is_refused_as_the_grpc_port(kube: Kube, namespace: str) -> None:
    proc = kube.apply(local_topic("clash", port=7421), namespace, check=False)
    assert proc.returncode != 0
    # the rule sits on the field, so the API server names it and the value
    want = "spec.port: Invalid value: 7421: must differ from the metrics port 7421"
    assert want in proc.stderr, proc.stderr
    assert kube.get("dt", "clash", namespace) is None


def test_precision_window_and_storage_are_immutable(kube: Kube, namespace: str) -> None:
    kube.apply(local_topic("fixed", precisionMs=100), namespace)
    proc = kube.apply(local_topic("fixed", precisionMs=1000), namespace, check=False)
    assert proc.returncode != 0 and "precisionMs is immutable" in proc.stderr
    changed = local_topic("fixed", precisionMs=100)
    changed["spec"]["storage"] = {"size": "2Gi"}
    proc = kube.apply(changed, namespace, check=False)
    assert proc.returncode != 0 and "storage is immutable" in proc.stderr
    wider = local_topic("fixed", precisionMs=100, wheelWindow="3d")
    proc = kube.apply(wider, namespace, check=False)
    assert proc.returncode != 0 and "wheelWindow is immutable" in proc.stderr
    assert kube.get("dt", "fixed", namespace)["spec"]["precisionMs"] == 100


def test_readiness_is_not_mastership_the_admin_probe_is(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    """A master pod marked not ready (a failed readiness probe, a slow node) keeps
    its office: the keeper probes the process itself through the admin API, and a
    master that answers in office is never failed over (no flapping)."""
    kube.apply(local_topic("fo", shards=1, replicasPerShard=2), namespace)
    wait_ready(kube, namespace, "fo", 1)
    before = record(kube, namespace, "fo")
    pod = kube.get("pod", "fo-shard-0-0", namespace)
    conditions = [
        {**c, "status": "False"} if c["type"] in ("Ready", "ContainersReady") else c
        for c in pod["status"]["conditions"]
    ]
    patch = json.dumps([{"op": "replace", "path": "/status/conditions", "value": conditions}])
    kube.kubectl(
        "patch", "pod", "fo-shard-0-0", "-n", namespace, "--subresource=status",
        "--type=json", "-p", patch,
    )  # fmt: skip
    time.sleep(5)  # longer than the lease: a failover would have happened by now
    after = record(kube, namespace, "fo")
    assert (after["master"], after["epoch"], after["failovers"]) == (
        before["master"], before["epoch"], 0,
    )  # fmt: skip
    assert kube.get("pod", "fo-shard-0-0", namespace)["metadata"]["labels"][ROLE] == "master"


def test_replicas_scale_down_moves_the_master_off_the_pods_it_removes_and_up_again(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    """A smaller replicasPerShard: the keeper hands the master over to a pod that
    stays and shrinks the in-sync set first; only then does the StatefulSet shrink.
    Nothing is lost."""
    kube.apply(local_topic("down", shards=1, replicasPerShard=3), namespace)
    wait_ready(kube, namespace, "down", 1)

    def all_in_sync() -> bool:
        return len(record(kube, namespace, "down").get("insync") or []) == 3

    kube.wait_for("all 3 in sync", all_in_sync)
    first = record(kube, namespace, "down")
    # move the master to pod 1 (a graceful delete of pod 0 hands it over)
    kube.kubectl("delete", "pod", "down-shard-0-0", "-n", namespace, "--wait=false")
    moved = kube.wait_for(
        "a new master",
        lambda: (
            (r := record(kube, namespace, "down"))["epoch"] > first["epoch"] and r["inOffice"] and r
        ),
    )
    assert moved["master"] != "down-shard-0-0"
    kube.wait_for("all 3 in sync again", all_in_sync, timeout_s=90)
    entry = address(kube, namespace, moved["master"])
    sent = client(kubelet, "schedule", entry, "down", "300", "15")
    assert sent["errors"] == [] and len(sent["ids"]) == 300

    kube.apply(local_topic("down", shards=1, replicasPerShard=1), namespace)
    done = kube.wait_for(
        "down-shard-0 scaled to one pod, which is the master",
        lambda: (
            kube.get("statefulset", "down-shard-0", namespace)["spec"]["replicas"] == 1
            and (r := record(kube, namespace, "down"))["master"] == "down-shard-0-0"
            and r
        ),
        timeout_s=90,
    )
    assert done["insync"] == ["down-shard-0-0"] and done["epoch"] > moved["epoch"]
    reasons = {e["reason"] for e in kube.items("events", namespace)}
    assert {"ScaleDownWaiting", "HandOver"} <= reasons, reasons
    wait_ready(kube, namespace, "down", 1)
    one = address(kube, namespace, "down-shard-0-0")
    got = client(kubelet, "receive", one, "down", "g", "300", "60")["received"]
    assert sorted(m["id"] for m in got) == sorted(sent["ids"]), "nothing lost"

    # and up again: the pod comes back on its kept volume (its old tail cut where
    # it diverged), catches up and joins the in-sync set
    kube.apply(local_topic("down", shards=1, replicasPerShard=2), namespace)
    kube.wait_for(
        "down-shard-0-1 back in sync",
        lambda: (
            record(kube, namespace, "down").get("insync") == ["down-shard-0-0", "down-shard-0-1"]
        ),
        timeout_s=90,
    )
    assert record(kube, namespace, "down")["master"] == "down-shard-0-0"


def test_delete_removes_owned_objects_and_keeps_or_deletes_volumes(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    kube.apply(local_topic("keep", shards=1, pvcRetention="Retain"), namespace)
    kube.apply(local_topic("drop", shards=1, pvcRetention="Delete"), namespace)
    wait_ready(kube, namespace, "keep", 1)
    wait_ready(kube, namespace, "drop", 1)
    pvcs = {p["metadata"]["name"] for p in kube.items("pvc", namespace)}
    assert pvcs == {"data-keep-shard-0-0", "data-drop-shard-0-0"}
    kube.kubectl("delete", "dt", "keep", "drop", "-n", namespace, "--wait=true")
    for name in ("keep", "drop"):
        kube.wait_for(
            f"{name}'s objects garbage-collected",
            lambda name=name: (
                not any(
                    names(kube, kind, namespace, name)
                    for kind in ("statefulsets", "services", "configmaps", "pdb", "pods")
                )
            ),
        )
    kube.wait_for(
        "drop's claim deleted, keep's retained",
        lambda: (
            {p["metadata"]["name"] for p in kube.items("pvc", namespace)} == {"data-keep-shard-0-0"}
        ),
    )


def test_a_namespace_deleted_with_its_topic_in_it_goes(
    kube: Kube, operator: Any, kubelet: LocalKubelet
) -> None:
    """Deleting the namespace, not the topic: the topic's daemon sees the deletion
    and its finalizer goes (kopf may no longer watch a namespace being deleted,
    which would then stay Terminating for ever)."""
    ns = f"dq-gone-{os.getpid()}"
    kube.kubectl("create", "namespace", ns)
    kube.apply(local_topic("doomed", shards=1), ns)
    wait_ready(kube, ns, "doomed", 1)
    kube.kubectl("delete", "namespace", ns, "--wait=false")
    kube.wait_for(
        "the namespace gone",
        lambda: kube.kubectl("get", "namespace", ns, check=False).returncode != 0,
        timeout_s=90,
    )


def test_kopf_run_loads_the_same_handlers(
    kube: Kube, control_plane: ControlPlane, kubelet: LocalKubelet
) -> None:
    ns = "kopfrun"  # outside the session operator's dq-* namespaces
    kube.kubectl("create", "namespace", ns)
    op = start_operator(
        kube.kubeconfig,
        control_plane.logs / "kopf-run.log",
        "run", "-m", "delayq_operator.handlers", "--standalone", "--namespace", ns,
        command=("kopf",),
    )  # fmt: skip
    try:
        kube.apply(local_topic("viakopf", shards=1), ns)
        assert wait_ready(kube, ns, "viakopf", 1)["masters"] == 1
    except AssertionError:
        print(op.tail())
        raise
    finally:
        op.stop()
