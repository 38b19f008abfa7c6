"""The Helm chart: lint, schema validation of its output, manifests/ in sync, and
``helm install`` into the real control plane with the installed operator (run
here as a local process under the chart's ServiceAccount token and RBAC)
bringing the example DelayTopic up with real shard processes (the local node's
``tests/k8s/support/kubelet.py``) that a client uses through any pod's address."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from delayq.addresses import METRICS_PORT
from delayq_operator import desired_objects, parse_spec
from delayq_operator.crd import LABEL_SHARD, LABEL_TOPIC
from delayq_operator.jobs import rebalance_job
from delayq_operator.main import parse_args
from delayq_operator.netpolicy import parse_labels
from tests.k8s.support.controlplane import ControlPlane, kubeconfig_text, require_binary
from tests.k8s.support.kube import ROOT, Kube, start_operator
from tests.k8s.support.kubelet import LocalKubelet, pod_selector
from tests.k8s.support.localpods import address, client

CHART = ROOT / "charts/delayq"
KUBE_VERSION = "1.35.4"
VALUE_SETS = {
    "default": [],
    "namespaced": ["--set", "operator.namespaces={apps,jobs}", "--set", "operator.verbose=true"],
    "example": ["--set", "example.enabled=true", "--set", "operator.peering.enabled=false"],
    "tls": ["--set", "operator.tls.secretName=delayq-operator-tls"],
    "push": ["--set", "operator.push.allow={10.0.0.0/8,127.0.0.1/32}"],
    "monitoring": [
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.serviceMonitor.labels.release=kps",
        "--set", "metrics.podMonitor.enabled=true",
        "--set", "metrics.podMonitor.interval=30s",
        "--set", "metrics.podMonitor.labels.release=kps",
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", "metrics.dashboards.enabled=true",
        "--set", "metrics.dashboards.namespace=grafana",
    ],
}  # fmt: skip
MONITORING = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def helm(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [require_binary("helm"), *args]
    if kubeconfig:
        cmd += ["--kubeconfig", str(kubeconfig)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("values", list(VALUE_SETS))
def test_helm_lint_strict(values: str) -> None:
    proc = helm("lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), *VALUE_SETS[values])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("values", list(VALUE_SETS))
def test_rendered_objects_match_the_kubernetes_schemas(values: str) -> None:
    proc = helm(
        "template", "t", str(CHART), "--include-crds", "--namespace", "ops",
        "--kube-version", KUBE_VERSION, *VALUE_SETS[values],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    checked = 0
    for doc in docs:
        if doc["apiVersion"].split("/")[0] in ("delayq.io", "kopf.dev"):
            continue  # our own kinds: the CRD schemas are checked by the API server tests
        if doc["apiVersion"].split("/")[0] == "monitoring.coreos.com":
            continue  # the Prometheus Operator's kinds: checked field by field below
        kubernetes_validate.validate(doc, "1.35.0", strict=True)
        checked += 1
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "CustomResourceDefinition"} <= kinds
    assert checked >= 6


def _rendered(*values: str) -> list[dict[str, Any]]:
    proc = helm(
        "template", "t", str(CHART), "--namespace", "ops", "--kube-version", KUBE_VERSION, *values
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _dashboards_map(doc: dict[str, Any]) -> bool:
    return doc["kind"] == "ConfigMap" and "delayq.json" in doc.get("data", {})


def test_the_defaults_render_no_monitoring_object() -> None:
    docs = _rendered()
    assert not [d for d in docs if d["kind"] in MONITORING or _dashboards_map(d)]


def _prometheus_label(name: str) -> str:
    """How Prometheus' Kubernetes discovery spells a pod label in a meta label."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions with Exists) on labels."""
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "Exists"
        if expr["key"] not in labels:
            return False
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


@pytest.mark.parametrize(
    ("key", "kind", "endpoints"),
    [
        ("podMonitor", "PodMonitor", "podMetricsEndpoints"),
        ("serviceMonitor", "ServiceMonitor", "endpoints"),
    ],
)
def test_a_monitor_scrapes_the_shard_pods_with_the_target_labels(
    key: str, kind: str, endpoints: str
) -> None:
    (monitor,) = [d for d in _rendered(*VALUE_SETS["monitoring"]) if d["kind"] == kind]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "ops"
    assert monitor["metadata"]["labels"]["release"] == "kps"  # metrics.<key>.labels
    assert monitor["metadata"]["labels"]["app.kubernetes.io/instance"] == "t"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"any": True}
    (endpoint,) = spec[endpoints]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == (
        "metrics",
        "/metrics",
        "http",
    )
    assert endpoint["interval"] == ("30s" if key == "podMonitor" else "15s")
    # the target labels the dashboard and the alert rules select by
    relabel = {r["targetLabel"]: r for r in endpoint["relabelings"]}
    assert set(relabel) == {"delaytopic", "shard", "node", "job"}
    assert relabel["delaytopic"]["sourceLabels"] == [_prometheus_label(LABEL_TOPIC)]
    assert relabel["shard"]["sourceLabels"] == [_prometheus_label(LABEL_SHARD)]
    assert relabel["node"]["sourceLabels"] == ["__meta_kubernetes_pod_name"]
    assert relabel["job"]["replacement"] == "delayq" and "sourceLabels" not in relabel["job"]
    assert all(r["action"] == "replace" for r in relabel.values())

    # what it selects of what the operator makes: every shard pod (or its headless
    # Service, the one with the metrics port), no Job's pod
    body = {
        "apiVersion": "delayq.io/v1alpha1",
        "kind": "DelayTopic",
        "metadata": {"name": "orders", "namespace": "apps", "uid": "u-1"},
        "spec": {"shards": 2, "replicasPerShard": 2},
    }
    objs = desired_objects(body)
    job = rebalance_job(body, parse_spec(body), epoch=3, target=3)
    if kind == "PodMonitor":
        pods = [o["spec"]["template"] for o in objs if o["kind"] == "StatefulSet"]
        assert len(pods) == 2
        for pod in pods:
            assert _selects(spec["selector"], pod["metadata"]["labels"])
            ports = pod["spec"]["containers"][0]["ports"]
            assert {"name": "metrics", "containerPort": METRICS_PORT} in ports
    else:
        services = [o for o in objs if o["kind"] == "Service"]
        chosen = [s for s in services if _selects(spec["selector"], s["metadata"]["labels"])]
        assert sorted(s["metadata"]["name"] for s in chosen) == [
            "orders-shard-0-pods",
            "orders-shard-1-pods",
        ], "the headless Services only, not the masters'"
        assert all(s["spec"]["clusterIP"] == "None" for s in chosen)
        assert all("metrics" in {p["name"] for p in s["spec"]["ports"]} for s in chosen)
    assert not _selects(spec["selector"], job["spec"]["template"]["metadata"]["labels"])


def test_the_monitors_look_in_the_namespaces_the_operator_watches() -> None:
    docs = _rendered(*VALUE_SETS["monitoring"], "--set", "operator.namespaces={apps,jobs}")
    monitors = [d for d in docs if d["kind"] in ("PodMonitor", "ServiceMonitor")]
    assert len(monitors) == 2
    for m in monitors:
        assert m["spec"]["namespaceSelector"] == {"matchNames": ["apps", "jobs"]}


def test_the_dashboards_config_map_holds_the_dashboard_file() -> None:
    (cm,) = [d for d in _rendered(*VALUE_SETS["monitoring"]) if _dashboards_map(d)]
    assert cm["metadata"]["name"] == "t-delayq-dashboards"
    assert cm["metadata"]["namespace"] == "grafana"  # metrics.dashboards.namespace
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's label
    text = (CHART / "dashboards/delayq.json").read_text()
    assert cm["data"]["delayq.json"] == text
    assert json.loads(cm["data"]["delayq.json"])["uid"] == "delayq"
    (cm,) = [d for d in _rendered("--set", "metrics.dashboards.enabled=true") if _dashboards_map(d)]
    assert cm["metadata"]["namespace"] == "ops"  # the release's


@pytest.mark.parametrize(
    ("setting", "error"),
    [
        ("metrics.podMonitor.enabled=maybe", "podMonitor/enabled': got string, want boolean"),
        ("metrics.serviceMonitor.interval=soon", "at '/metrics/serviceMonitor/interval'"),
        ("metrics.dashboards.labels.grafana_dashboard=1", "got number, want string"),
        ("metrics.podMonitor.intervall=15s", "additional properties 'intervall' not allowed"),
        ("metrics.prometheusRule.enabled=yes", "at '/metrics/prometheusRule/enabled'"),
        ("operator.logFormat=xml", "value must be one of 'plain', 'full', 'json'"),
        ("operator.certificates.settle=5m30s", "at '/operator/certificates/settle'"),
        ("operator.replicas=two", "at '/operator/replicas'"),
        ("example.replicasPerShard=9", "at '/example/replicasPerShard'"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("operator.namespace=apps", "additional properties 'namespace' not allowed"),
        ("operator.push.allow={10.0.0.0/8,nope}", "at '/operator/push/allow/1'"),
    ],
)  # fmt: skip
def test_the_schema_refuses_a_bad_value(setting: str, error: str) -> None:
    for command in (["template", "t"], ["lint"]):
        proc = helm(*command, str(CHART), "--kube-version", KUBE_VERSION, "--set", setting)
        assert proc.returncode != 0, (command, setting)
        out = proc.stdout + proc.stderr
        assert "values don't meet the specifications of the schema" in out, out
        assert error in out, out


def _schema_at(schema: dict[str, Any], node: dict[str, Any], path: list[str]) -> dict[str, Any]:
    """The schema of the value at ``path`` (properties, through $refs)."""
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
    if not path:
        return node
    if "properties" in node:  # an object of known keys, and no other
        assert node.get("additionalProperties") is False, path
        assert path[0] in node["properties"], path
        return _schema_at(schema, node["properties"][path[0]], path[1:])
    return _schema_at(schema, node["additionalProperties"], path[1:])  # a map


def _leaves(value: Any, path: list[str]) -> list[list[str]]:
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _leaves(v, [*path, k])]
    return [path]


def test_the_schema_types_every_value_of_values_yaml() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    leaves = _leaves(values, [])
    assert len(leaves) > 30
    for path in leaves:
        node = _schema_at(schema, schema, path)
        assert {"type", "enum", "anyOf"} & set(node), ".".join(path)
    # the monitoring values, exactly
    assert values["metrics"] == {
        "serviceMonitor": {"enabled": False, "interval": "15s", "labels": {}},
        "podMonitor": {"enabled": False, "interval": "15s", "labels": {}},
        "prometheusRule": {"enabled": False, "labels": {}},
        "dashboards": {"enabled": False, "labels": {"grafana_dashboard": "1"}, "namespace": ""},
    }


def _operator_deployment(values: str) -> dict[str, Any]:
    proc = helm(
        "template", "t", str(CHART), "--namespace", "ops",
        "--kube-version", KUBE_VERSION, *VALUE_SETS[values],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (dep,) = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Deployment"]
    return dict(dep)


def test_the_operator_gets_its_client_certificate_from_a_secret() -> None:
    pod = _operator_deployment("tls")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert {k: env[k] for k in env if k.startswith("DELAYQ_OPERATOR_TLS_")} == {
        "DELAYQ_OPERATOR_TLS_CERT": "/etc/delayq-operator-tls/tls.crt",
        "DELAYQ_OPERATOR_TLS_KEY": "/etc/delayq-operator-tls/tls.key",
        "DELAYQ_OPERATOR_TLS_CA": "/etc/delayq-operator-tls/ca.crt",
    }
    certs = {"name": "certs", "mountPath": "/var/run/delayq-operator/certs"}
    assert container["volumeMounts"] == [
        certs,
        {"name": "tls", "mountPath": "/etc/delayq-operator-tls", "readOnly": True},
    ]
    in_memory = {"name": "certs", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}
    assert pod["volumes"] == [
        in_memory,
        {"name": "tls", "secret": {"secretName": "delayq-operator-tls", "defaultMode": 0o440}},
    ]
    assert pod["securityContext"]["fsGroup"] == 10001  # the key is readable by the group
    plain = _operator_deployment("default")["spec"]["template"]["spec"]
    assert plain["volumes"] == [in_memory], "the keepers' certificates: memory, never disk"
    env = {e["name"]: e["value"] for e in plain["containers"][0]["env"]}
    assert not any(k.startswith("DELAYQ_OPERATOR_TLS") for k in env)
    # the operator's CA: lifetimes and where the keepers' certificates go
    assert {k: env[k] for k in env if "LIFETIME" in k or "CERT" in k} == {
        "DELAYQ_OPERATOR_LEAF_LIFETIME": "90d",
        "DELAYQ_OPERATOR_CA_LIFETIME": "1825d",
        "DELAYQ_OPERATOR_CERT_SETTLE": "300s",
        "DELAYQ_OPERATOR_CERTS_DIR": "/var/run/delayq-operator/certs",
    }


def test_the_operator_is_told_its_pods_namespace_and_labels() -> None:
    """What the topics' NetworkPolicies admit to the admin port: exactly the
    operator's pods (their template's labels, the release's namespace)."""
    template = _operator_deployment("default")["spec"]["template"]
    env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
    assert env["DELAYQ_OPERATOR_POD_NAMESPACE"] == "ops"
    assert parse_labels(env["DELAYQ_OPERATOR_POD_LABELS"]) == template["metadata"]["labels"]
    assert template["metadata"]["labels"]["app.kubernetes.io/instance"] == "t"


def test_manifests_are_rendered_from_the_chart() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/render_manifests.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _sa_kubeconfig(kube: Kube, cp: ControlPlane, namespace: str, sa: str) -> Path:
    token = kube.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").stdout.strip()
    path = cp.root / f"kubeconfig-{sa}"
    path.write_text(kubeconfig_text(cp.server, cp.certs.ca, user={"token": token}))
    return path


def _can(kube: Kube, verb: str, what: str, namespace: str, sa: str) -> bool:
    proc = kube.kubectl("auth", "can-i", verb, what, "-n", namespace, "--as", sa, check=False)
    return proc.stdout.strip() == "yes"


def test_helm_install_brings_up_an_operator_that_serves_the_example(
    kube: Kube, control_plane: ControlPlane, kubelet: LocalKubelet, tmp_path: Path
) -> None:
    ops, apps = "helm-ops", "helm-apps"
    kube.kubectl("create", "namespace", apps)
    proc = helm(
        "install", "dq", str(CHART), "--namespace", ops, "--create-namespace",
        "--set", f"operator.namespaces={{{apps}}}", "--wait", "--timeout", "90s",
        kubeconfig=control_plane.kubeconfig,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "watches: helm-apps" in proc.stdout  # NOTES.txt
    assert "rocketmq (7423)" in proc.stdout  # (tests/k8s/test_rocketmq.py uses that port)
    deploy = kube.get("deployment", "dq-delayq-operator", ops)
    assert deploy["status"]["readyReplicas"] == 1  # its pod runs (on a fake node)
    assert kube.get("kopfpeering", "delayq-operator", apps) is not None

    sa = "system:serviceaccount:helm-ops:dq-delayq-operator"
    assert _can(kube, "create", "statefulsets.apps", apps, sa)
    assert _can(kube, "patch", "delaytopics.delayq.io/status", apps, sa)
    # DelaySchedules: watched, their status and kopf's finalizer written
    assert _can(kube, "watch", "delayschedules.delayq.io", apps, sa)
    assert _can(kube, "patch", "delayschedules.delayq.io", apps, sa)
    assert _can(kube, "patch", "delayschedules.delayq.io/status", apps, sa)
    assert not _can(kube, "create", "delayschedules.delayq.io", apps, sa)
    # a change of spec.shards: the rebalance Job, then a drained shard's objects go
    assert _can(kube, "create", "jobs.batch", apps, sa)
    assert _can(kube, "delete", "statefulsets.apps", apps, sa)
    assert _can(kube, "delete", "cronjobs.batch", apps, sa)
    assert _can(kube, "patch", "networkpolicies.networking.k8s.io", apps, sa)
    assert _can(kube, "delete", "networkpolicies.networking.k8s.io", apps, sa)
    assert not _can(kube, "create", "statefulsets.apps", "default", sa)
    assert not _can(kube, "delete", "persistentvolumeclaims", apps, sa)
    # the namespace's CA and the certificates it issues: read, made, renewed; never
    # deleted, and only in the namespaces it watches
    assert _can(kube, "create", "secrets", apps, sa) and _can(kube, "update", "secrets", apps, sa)
    assert not _can(kube, "delete", "secrets", apps, sa)
    assert not _can(kube, "get", "secrets", "default", sa)

    # The chart's operator container, run here: same command line settings as its
    # Deployment env, authenticated with the chart's ServiceAccount token.
    env: dict[str, Any] = {
        e["name"]: e.get("value", "")
        for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    op = start_operator(
        _sa_kubeconfig(kube, control_plane, ops, "dq-delayq-operator"),
        control_plane.logs / "helm-operator.log",
        "--namespace", env["DELAYQ_OPERATOR_NAMESPACES"],
        "--peering", env["DELAYQ_OPERATOR_PEERING"],
        "--log-format", env["DELAYQ_OPERATOR_LOG_FORMAT"],
        "--default-image", env["DELAYQ_OPERATOR_DEFAULT_IMAGE"],
        "--pod-namespace", env["DELAYQ_OPERATOR_POD_NAMESPACE"],
        "--pod-labels", env["DELAYQ_OPERATOR_POD_LABELS"],
    )  # fmt: skip
    try:
        # the example as shipped, placed on the local node (its pods run as processes)
        example = yaml.safe_load((ROOT / "manifests/examples/delaytopic.yaml").read_text())
        example["spec"].update(pod_selector())
        (tmp_path / "delaytopic.yaml").write_text(yaml.safe_dump(example))
        kube.kubectl("apply", "-n", apps, "-f", str(tmp_path / "delaytopic.yaml"))
        s = kube.wait_for(
            "the chart's operator makes orders Ready",
            lambda: (
                (obj := kube.get("dt", "orders", apps))
                and (obj.get("status") or {}).get("phase") == "Ready"
                and obj["status"]
            ),
            timeout_s=90,
        )
        assert (s["readyShards"], s["masters"]) == ("2/2", 2)
        one = address(kube, apps, "orders-shard-1-1")  # a replica's address
        sent = client(kubelet, "schedule", one, "orders", "100", "1")
        assert sent["errors"] == [] and sent["shards"] == [0, 1]
        got = client(kubelet, "receive", one, "orders", "g", "100", "60")["received"]
        assert sorted(m["id"] for m in got) == sorted(sent["ids"])
        sts = kube.get("statefulset", "orders-shard-0", apps)
        image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == env["DELAYQ_OPERATOR_DEFAULT_IMAGE"] == "delayq:0.1.0"
        # its NetworkPolicy, applied under the chart's RBAC, admits these pods to 7422
        policy = kube.get("networkpolicy", "orders-shards", apps)
        operator_peer = policy["spec"]["ingress"][0]["from"][0]
        pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
        assert operator_peer["podSelector"]["matchLabels"] == pod_labels
        assert operator_peer["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": ops
        }
        assert "Traceback" not in op.tail(200)
    except AssertionError:
        print(op.tail(), file=sys.stderr)
        raise
    finally:
        op.stop()
    proc = helm("uninstall", "dq", "--namespace", ops, kubeconfig=control_plane.kubeconfig)
    assert proc.returncode == 0, proc.stderr


def test_the_operator_gets_the_default_push_allow_list() -> None:
    """``operator.push.allow``: every topic's pods may push there (the operator's
    ``--push-allow`` twin, parsed as the operator parses it)."""
    for values, want in (("push", ("10.0.0.0/8", "127.0.0.1/32")), ("default", ())):
        container = _operator_deployment(values)["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DELAYQ_OPERATOR_PUSH_ALLOW", env["DELAYQ_OPERATOR_PUSH_ALLOW"])
            assert parse_args([]).push_allow == want
