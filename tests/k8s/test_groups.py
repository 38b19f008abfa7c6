"""``DelayTopic.spec.groups[]`` against a real kube-apiserver: the CRD's schema
refuses a bad group policy at ``kubectl apply``, naming the field, and takes a
good one as written; an operator run where the pods' DNS names resolve (as in
a cluster) sets the declared policies on every shard of a topic whose pods are
real ``delayq serve`` processes, follows the spec's changes and reports them
in ``status.groups``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.k8s.support.controlplane import ControlPlane
from tests.k8s.support.kube import Kube
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.localpods import (
    address,
    client,
    in_cluster_operator,
    local_topic,
    status,
    wait_ready,
)

GOOD = {
    "name": "billing",
    "maxAttempts": 5,
    "backoff": {
        "kind": "exponential",
        "initial": "500ms",
        "multiplier": 2.5,
        "max": "5m",
        "jitter": "full",
    },
    "rate": 200.5,
    "burst": 50,
    "maxInFlight": 1000,
    "paused": False,
}


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({"name": "g", "rate": -1}, "spec.groups[0].rate: Invalid value"),
        (
            {"name": "g", "backoff": {"initial": "10s", "max": "2s"}},
            "spec.groups[0].backoff.max: Invalid value: backoff max must be at least its initial",
        ),
        (
            {"name": "g", "backoff": {"max": "500ms", "initial": "1s", "kind": "exponential"}},
            "backoff max must be at least its initial",
        ),
        ({"name": "no spaces"}, "spec.groups[0].name: Invalid value"),
        ({"name": "-dash-first"}, "spec.groups[0].name: Invalid value"),
        ({"name": "g" * 125}, "spec.groups[0].name: Too long"),
        ({"name": "g", "maxAttempts": 1001}, "spec.groups[0].maxAttempts: Invalid value"),
        ({"name": "g", "maxInFlight": 10_000_001}, "spec.groups[0].maxInFlight: Invalid value"),
        ({"name": "g", "rate": 1_000_001}, "spec.groups[0].rate: Invalid value"),
        ({"name": "g", "backoff": {"initial": "13h"}}, "must be at most 12h"),
        ({"name": "g", "backoff": {"initial": "2d"}}, "spec.groups[0].backoff.initial"),
        ({"name": "g", "backoff": {"multiplier": 0.5}}, "spec.groups[0].backoff.multiplier"),
        ({"name": "g", "backoff": {"kind": "linear"}}, "spec.groups[0].backoff.kind"),
        ({"name": "g", "backoff": {"jitter": "some"}}, "spec.groups[0].backoff.jitter"),
        ({"maxAttempts": 3}, "spec.groups[0].name: Required value"),
    ],
)
def test_bad_group_policies_are_refused_at_apply(
    kube: Kube, namespace: str, group: dict[str, Any], message: str
) -> None:
    proc = kube.apply(local_topic("bad", groups=[group]), namespace, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert kube.get("dt", "bad", namespace) is None


def test_a_group_is_declared_once(kube: Kube, namespace: str) -> None:
    twice = [{"name": "g", "maxAttempts": 1}, {"name": "g", "maxAttempts": 2}]
    proc = kube.apply(local_topic("twice", groups=twice), namespace, check=False)
    assert proc.returncode != 0
    assert "spec.groups[1]: Duplicate value" in proc.stderr, proc.stderr


def test_a_good_group_policy_is_stored_as_written(kube: Kube, namespace: str) -> None:
    plain = {"name": "audit.v2_x", "backoff": {"initial": "12h", "max": "12h"}}
    kube.apply(local_topic("good", groups=[GOOD, plain]), namespace)
    assert kube.get("dt", "good", namespace)["spec"]["groups"] == [GOOD, plain]


NAME = "grp"
DEFAULTS = {
    "max_attempts": 16,
    "backoff": {"kind": "fixed", "initial_ms": 0, "multiplier": 2.0, "max_ms": 0, "jitter": "none"},
    "rate_per_s": 0.0,
    "burst": 0,
    "max_in_flight": 0,
    "paused": False,
    "push": None,
}


@pytest.fixture
def in_cluster(kube: Kube, control_plane: ControlPlane, kubelet: LocalKubelet) -> Iterator[str]:
    with in_cluster_operator(kube, kubelet, control_plane.logs, "groups") as ns:
        yield ns


def group_entries(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in status(kube, ns, NAME).get("groups") or []}


def held(kube: Kube, kubelet: LocalKubelet, ns: str) -> dict[str, Any]:
    """The topic's groups as every shard's master holds them (a client in the cluster)."""
    at = address(kube, ns, f"{NAME}-shard-0-0")
    return dict(client(kubelet, "groups", at, NAME)["groups"])


def test_declared_groups_are_set_on_every_shard_and_follow_the_spec(
    kube: Kube, kubelet: LocalKubelet, in_cluster: str
) -> None:
    ns = in_cluster
    billing = {
        "name": "billing",
        "maxAttempts": 5,
        "backoff": {"kind": "exponential", "initial": "1s", "max": "5m", "jitter": "full"},
        "rate": 200,
        "maxInFlight": 1000,
    }
    audit = {"name": "audit", "paused": True}
    kube.apply(local_topic(NAME, shards=2, groups=[billing, audit]), ns)
    wait_ready(kube, ns, NAME, 2)

    def applied(names: set[str]) -> dict[str, dict[str, Any]] | None:
        got = group_entries(kube, ns)
        return got if set(got) == names and all(g["applied"] for g in got.values()) else None

    entries = kube.wait_for("both groups applied", lambda: applied({"billing", "audit"}), 120)
    assert entries["audit"]["paused"] is True and entries["billing"]["paused"] is False
    groups = held(kube, kubelet, ns)
    for name in ("billing", "audit"):
        assert groups[name]["shards"] == [0, 1] and groups[name]["disagreeing"] == []
        assert groups[name]["explicit"] is True
    assert groups["billing"]["policy"] == {
        "max_attempts": 5,
        "backoff": {
            "kind": "exponential",
            "initial_ms": 1000,
            "multiplier": 2.0,
            "max_ms": 300_000,
            "jitter": "full",
        },
        "rate_per_s": 200.0,
        "burst": 200,
        "max_in_flight": 1000,
        "paused": False,
        "push": None,
    }
    assert groups["audit"]["policy"] == {**DEFAULTS, "paused": True}

    # billing paused and given 3 attempts by hand, 20 messages in flight: the next
    # periodic round puts its attempts back and keeps the pause (its entry does not
    # say paused), the status shows both and the 20 in flight
    at = address(kube, ns, f"{NAME}-shard-0-0")
    assert client(kubelet, "drift", at, NAME, "billing", "20")["received"] == 20

    def drift_mended() -> dict[str, Any] | None:
        got = group_entries(kube, ns).get("billing") or {}
        mended = got.get("paused") is True and got.get("inFlight") == 20 and got["applied"]
        return got if mended else None

    kube.wait_for("billing's drift put right, its pause kept", drift_mended, 120)
    policy = held(kube, kubelet, ns)["billing"]["policy"]
    assert (policy["max_attempts"], policy["paused"]) == (5, True)

    # billing changed, audit no longer declared: back to the defaults (resumed)
    kube.apply(local_topic(NAME, shards=2, groups=[{**billing, "maxAttempts": 7}]), ns)
    kube.wait_for("audit dropped from the status", lambda: applied({"billing"}), 120)
    groups = held(kube, kubelet, ns)
    assert (groups["billing"]["policy"]["max_attempts"], groups["billing"]["policy"]["paused"]) == (
        7,
        True,
    )
    assert groups["audit"]["policy"] == DEFAULTS
    reasons = {e["reason"] for e in kube.items("events", ns)}
    assert "GroupPolicySet" in reasons
