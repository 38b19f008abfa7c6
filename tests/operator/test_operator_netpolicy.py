"""A DelayTopic's NetworkPolicy, built without a cluster."""

from __future__ import annotations

from typing import Any

import pytest

from delayq_operator import SpecError, desired_objects, parse_spec
from delayq_operator.jobs import rebalance_job
from delayq_operator.netpolicy import OperatorPods, network_policy, parse_labels
from tests.operator.test_operator_desired import by_kind, topic

OPERATOR = OperatorPods(
    namespace="ops", labels={"app.kubernetes.io/name": "delayq-operator", "release": "r1"}
)
OPERATOR_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "delayq-operator", "release": "r1"}},
}
PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
CLIENTS = {"podSelector": {"matchLabels": {"role": "orders-client"}}}


def policy(**spec: Any) -> dict[str, Any]:
    body = topic(**spec)
    got = network_policy(body, parse_spec(body), OPERATOR)
    assert got is not None
    return got


def rules(pol: dict[str, Any]) -> dict[tuple[int, ...], list[dict[str, Any]] | None]:
    """Ports of each ingress rule -> its peers (None: every source)."""
    out: dict[tuple[int, ...], list[dict[str, Any]] | None] = {}
    for rule in pol["spec"]["ingress"]:
        assert {p["protocol"] for p in rule["ports"]} == {"TCP"}
        out[tuple(p["port"] for p in rule["ports"])] = rule.get("from")
    return out


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector, as the API server reads one (the operators used here)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        assert e["operator"] in ("Exists", "DoesNotExist")
        if (e["key"] in labels) != (e["operator"] == "Exists"):
            return False
    return True


def shard_pod_labels(objs: list[dict[str, Any]]) -> dict[str, str]:
    sts = by_kind(objs, "StatefulSet")[0]
    return dict(sts["spec"]["template"]["metadata"]["labels"])


def job_pod_labels(body: dict[str, Any]) -> dict[str, str]:
    job = rebalance_job(body, parse_spec(body), epoch=3, target=2)
    return dict(job["spec"]["template"]["metadata"]["labels"])


def test_the_default_admits_only_the_control_plane_to_the_admin_port() -> None:
    body = topic(shards=2)
    pol = policy(shards=2)
    assert pol["apiVersion"] == "networking.k8s.io/v1" and pol["kind"] == "NetworkPolicy"
    assert pol["metadata"]["name"] == "orders-shards"
    assert pol["metadata"]["namespace"] == "prod"
    (owner,) = pol["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("DelayTopic", "orders", "u-1")
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    got = rules(pol)
    assert set(got) == {(7422,), (7421,), (7420, 7423)}
    assert got[(7421,)] is None and got[(7420, 7423)] is None  # every source
    admin = got[(7422,)]
    assert admin is not None and admin[0] == OPERATOR_PEER
    # the policy selects the shard pods, not the Job pods; the admin port admits both
    shard, job = shard_pod_labels(desired_objects(body)), job_pod_labels(body)
    selected = pol["spec"]["podSelector"]
    assert matches(selected, shard) and not matches(selected, job)
    inside = [p["podSelector"] for p in admin[1:]]
    assert all("namespaceSelector" not in p for p in admin[1:])  # the topic's namespace
    assert any(matches(s, shard) for s in inside) and any(matches(s, job) for s in inside)
    other = {**shard, "delayq.io/topic": "payments"}
    assert not any(matches(s, other) for s in [selected, *inside])


def test_custom_selectors_restrict_metrics_and_public_ports() -> None:
    pol = policy(networkPolicy={"metricsFrom": [PROMETHEUS], "publicFrom": [CLIENTS]}, port=7500)
    got = rules(pol)
    assert got[(7421,)] == [PROMETHEUS]
    # the operator (Stats) and the topic's jobs (the shard map) still reach the public port
    assert got[(7500, 7423)] == [CLIENTS, *(got[(7422,)] or [])]


def test_the_operators_labels_and_namespace_follow_its_settings() -> None:
    body = topic()
    other = OperatorPods(namespace="delayq", labels={"app.kubernetes.io/instance": "blue"})
    pol = network_policy(body, parse_spec(body), other)
    assert pol is not None
    assert pol["spec"]["ingress"][0]["from"][0] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "delayq"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/instance": "blue"}},
    }
    assert OperatorPods().peer()["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "delayq-operator"}
    }


def test_disabled_is_no_policy() -> None:
    body = topic(networkPolicy={"enabled": False, "publicFrom": [CLIENTS]})
    assert network_policy(body, parse_spec(body), OPERATOR) is None


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"enabled": "yes"}, "spec.networkPolicy.enabled"),
        ({"metricsFrom": {"podSelector": {}}}, "spec.networkPolicy.metricsFrom"),
        ({"publicFrom": [{}]}, "spec.networkPolicy.publicFrom"),
        ({"publicFrom": [{"pods": {}}]}, "spec.networkPolicy.publicFrom"),
    ],
)
def test_bad_network_policy_specs_name_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(topic(networkPolicy=doc))
    assert err.value.field == field


def test_parse_labels() -> None:
    assert parse_labels("a=1, b/c=x,") == {"a": "1", "b/c": "x"}
    assert parse_labels("") == {}
    with pytest.raises(ValueError, match="key=value"):
        parse_labels("a")


def test_the_operator_takes_its_pods_namespace_and_labels_from_its_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from delayq_operator.main import parse_args

    monkeypatch.setenv("DELAYQ_OPERATOR_POD_NAMESPACE", "ops")
    monkeypatch.setenv("DELAYQ_OPERATOR_POD_LABELS", "app.kubernetes.io/name=delayq-operator,r=1")
    assert parse_args([]).operator_pods == OperatorPods(
        namespace="ops", labels={"app.kubernetes.io/name": "delayq-operator", "r": "1"}
    )
    monkeypatch.delenv("DELAYQ_OPERATOR_POD_LABELS")
    got = parse_args(["--pod-namespace", "x"]).operator_pods
    assert got == OperatorPods(namespace="x")  # the chart's name label
    with pytest.raises(SystemExit):
        parse_args(["--pod-labels", ","])  # no label: every pod of the namespace
