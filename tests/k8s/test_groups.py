"""``DelayTopic.spec.groups[]`` against a real kube-apiserver: the CRD's schema
refuses a bad group policy at ``kubectl apply``, naming the field, and takes a
good one as written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.k8s.support.kube import Kube
from tests.k8s.support.localpods import local_topic

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
