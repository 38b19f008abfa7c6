"""``DelaySchedule`` against a real kube-apiserver: the CRD's schema refuses a bad
spec at ``kubectl apply``, naming the field, and stores a good one with its
defaults; an operator run where the pods' DNS names resolve (as in a cluster)
keeps a DelaySchedule applied with kubectl on its DelayTopic's shards (real
``delayq serve`` processes on the local kubelet): a consumer receives its
firings into its topic, each with the schedule's key and headers and its own
nominal time; the status follows (fired, last and next times); ``suspend``
pauses it and nothing past the pause fires, clearing it resumes it; a schedule
deleted by other means is made again; deleting the resource deletes the
schedule (its finalizer)."""

from __future__ import annotations

import itertools
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
    wait_ready,
)

SCHEDULE = "delayq-schedule"
SCHEDULE_TIME = "delayq-schedule-time"


def schedule(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "delayq.io/v1alpha1",
        "kind": "DelaySchedule",
        "metadata": {"name": name},
        "spec": {"topicRef": {"name": "orders"}, "topic": "ticks", **spec},
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"cron": "* * * * *", "every": "30s"},
         "spec: Invalid value: set exactly one of cron and every"),
        ({}, "set exactly one of cron and every"),
        ({"cron": "* * *"}, "spec.cron: Invalid value"),
        ({"cron": "@daily"}, "spec.cron: Invalid value"),
        ({"every": "500ms"}, "spec.every: Invalid value: \"500ms\": must be at least 1s"),
        ({"every": "1d"}, "spec.every: Invalid value"),
        ({"every": "10s", "jitter": "20s"}, "spec.jitter: Invalid value: jitter must be shorter"),
        ({"every": "10h", "jitter": "2h"},
         "spec.jitter: Invalid value: \"2h\": must be at most 1h"),
        ({"every": "1m", "timeZone": "Not a zone"}, "spec.timeZone: Invalid value"),
        ({"every": "1m", "start": "tomorrow"}, "spec.start: Invalid value"),
        ({"every": "1m", "start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"},
         "spec.end: Invalid value: end must be after start"),
        ({"every": "1m", "catchUp": {"policy": "most"}}, "spec.catchUp.policy: Unsupported value"),
        ({"every": "1m", "catchUp": {"window": "8d"}}, "spec.catchUp.window: Invalid value"),
        ({"every": "1m", "catchUp": {"window": "0d"}}, "spec.catchUp.window: Invalid value"),
        ({"every": "8785h"}, "spec.every: Invalid value: \"8785h\": must be at most 366d"),
        ({"every": "999999999h"}, "spec.every: Invalid value: \"999999999h\": must be at most"),
        ({"every": "527041m"}, "spec.every: Invalid value: \"527041m\": must be at most 366d"),
        ({"every": "1m", "message": {"headers": {"delayq-schedule": "x"}}},
         "spec.message.headers: Invalid value"),
        ({"every": "1m", "topic": "_schedules"}, "spec.topic: Invalid value"),
        ({"every": "1m", "topicRef": {}}, "spec.topicRef.name: Required value"),
        ({"every": "1m", "suspend": "yes"}, "spec.suspend: Invalid value"),
    ],
)  # fmt: skip
def test_bad_schedules_are_refused_at_apply(
    kube: Kube, namespace: str, spec: dict[str, Any], message: str
) -> None:
    proc = kube.apply(schedule("bad", **spec), namespace, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert kube.get("dsched", "bad", namespace) is None


def test_a_name_longer_than_a_schedules_is_refused(kube: Kube, namespace: str) -> None:
    proc = kube.apply(schedule("n" * 129, every="1m"), namespace, check=False)
    assert proc.returncode != 0
    assert "at most 128 characters" in proc.stderr, proc.stderr


def test_the_topic_ref_is_immutable(kube: Kube, namespace: str) -> None:
    kube.apply(schedule("fixed", every="1m"), namespace)
    moved = schedule("fixed", every="1m", topicRef={"name": "other"})
    proc = kube.apply(moved, namespace, check=False)
    assert proc.returncode != 0
    assert "spec.topicRef: Invalid value: topicRef is immutable" in proc.stderr, proc.stderr


def test_a_good_schedule_is_stored_with_its_defaults(kube: Kube, namespace: str) -> None:
    kube.apply(schedule("good", cron="0 2 * * MON-FRI"), namespace)
    spec = kube.get("dsched", "good", namespace)["spec"]
    assert spec == {
        "topicRef": {"name": "orders"},
        "topic": "ticks",
        "cron": "0 2 * * MON-FRI",
        "timeZone": "UTC",
        "suspend": False,
    }
    full = {
        "every": "90s",
        "timeZone": "Australia/Lord_Howe",
        "start": "2026-01-01T00:00:00Z",
        "end": "2027-01-01T00:00:00+10:30",
        "jitter": "1500ms",
        "catchUp": {"policy": "all", "window": "7d"},
        "message": {"body": "b", "headers": {"team": "ops"}},
        "suspend": True,
    }
    kube.apply(schedule("full", **full), namespace)
    assert kube.get("dsched", "full", namespace)["spec"] == {
        "topicRef": {"name": "orders"},
        "topic": "ticks",
        **full,
    }
    kube.apply(schedule("defaults", every="1m", catchUp={}), namespace)
    stored = kube.get("dsched", "defaults", namespace)["spec"]["catchUp"]
    assert stored == {"policy": "latest", "window": "1h"}


def condition(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    obj = kube.get("dsched", name, ns) or {}
    conds = (obj.get("status") or {}).get("conditions") or []
    return dict({c["type"]: c for c in conds}.get("Ready") or {})


def test_what_the_operator_cannot_apply_is_in_the_status_and_deletion_is_not_held(
    kube: Kube, namespace: str
) -> None:
    """The operator's own checks (the schedule API's: a cron field out of range, an
    unknown zone) and a missing DelayTopic: Ready False naming why, a Warning
    event; deleting such a resource is not held by its finalizer."""
    ns = namespace
    kube.apply(schedule("minute61", cron="61 * * * *"), ns)
    kube.apply(schedule("mars", every="1m", timeZone="Mars/Olympus_Mons"), ns)
    kube.apply(schedule("orphan", every="1m"), ns)
    for name, reason, field in (
        ("minute61", "InvalidSpec", "spec.cron: "),
        ("mars", "InvalidSpec", "spec.timeZone: "),
        ("orphan", "TopicNotFound", f"no DelayTopic orders in {ns}"),
    ):
        c = kube.wait_for(
            f"{name}: {reason}",
            lambda name=name: (c := condition(kube, ns, name)).get("status") == "False" and c,
            60,
        )
        assert c["reason"] == reason and c["message"].startswith(field), c
    want = {("minute61", "InvalidSpec"), ("mars", "InvalidSpec"), ("orphan", "TopicNotFound")}
    kube.wait_for(
        f"Warning events {want}",
        lambda: (
            want
            <= {
                (e["involvedObject"]["name"], e["reason"])
                for e in kube.items("events", ns)
                if e["type"] == "Warning"
            }
        ),
    )
    for name in ("minute61", "mars", "orphan"):
        assert "delayq.io/finalizer" in kube.get("dsched", name, ns)["metadata"]["finalizers"]
        kube.kubectl("delete", "dsched", name, "-n", ns, "--timeout=60s")
        assert kube.get("dsched", name, ns) is None


NAME = "tick"


@pytest.fixture
def in_cluster(kube: Kube, control_plane: ControlPlane, kubelet: LocalKubelet) -> Iterator[str]:
    with in_cluster_operator(kube, kubelet, control_plane.logs, "schedules") as ns:
        yield ns


def ready(kube: Kube, ns: str, **want: Any) -> dict[str, Any] | None:
    """The DelaySchedule's status once its Ready condition is True and it has
    ``want``'s fields as given."""
    obj = kube.get("dsched", NAME, ns) or {}
    s = dict(obj.get("status") or {})
    cond = {c["type"]: c for c in s.get("conditions") or []}.get("Ready") or {}
    applied = s.get("observedGeneration") == obj.get("metadata", {}).get("generation")
    ok = cond.get("status") == "True" and all(s.get(k) == v for k, v in want.items())
    return s if applied and ok else None


def events(kube: Kube, ns: str) -> list[str]:
    return [
        e["reason"]
        for e in kube.items("events", ns)
        if e["involvedObject"].get("kind") == "DelaySchedule"
    ]


def test_a_delayschedule_fires_into_its_topic_and_follows_its_spec(
    kube: Kube, kubelet: LocalKubelet, in_cluster: str
) -> None:
    ns = in_cluster
    kube.apply(local_topic("orders", shards=2), ns)
    # applied with its topic: its rounds find no shard serving at first, and make
    # the schedule once one does
    every = {"every": "2s", "message": {"body": "tick", "headers": {"team": "ops"}}}
    kube.apply(schedule(NAME, **every), ns)
    wait_ready(kube, ns, "orders", 2)
    at = address(kube, ns, "orders-shard-0-0")
    s = kube.wait_for("the schedule made", lambda: ready(kube, ns, paused=False), 120)
    assert s["nextFireTime"] and s["scheduleId"]

    # a consumer receives its firings: key and headers the schedule's, every
    # nominal time its own, an interval apart (the client routes by name to the
    # shard owning it; the firings' key is the name, so they are on that shard)
    got = client(kubelet, "receive", at, "ticks", "g", "4", "60")["received"]
    assert len(got) == 4
    times = sorted(int(m["headers"][SCHEDULE_TIME]) for m in got)
    assert len(set(times)) == 4
    assert all(b - a >= 2000 and (b - a) % 2000 == 0 for a, b in itertools.pairwise(times))
    for m in got:
        assert (m["key"], m["body"], m["headers"][SCHEDULE]) == (NAME, "tick", NAME)
        assert m["headers"]["team"] == "ops"
        assert m["early_ms"] <= 0  # none before due
    kube.wait_for(
        "the status counts them",
        lambda: (r := ready(kube, ns)) and r.get("fired", 0) >= 4 and r.get("lastFireTime"),
        60,
    )
    # rounds of an unchanged resource make no call: created once, never updated
    assert events(kube, ns).count("ScheduleCreated") == 1
    assert "ScheduleUpdated" not in events(kube, ns)

    # suspended: paused on its shard, no next time, and nothing fires past the pause
    kube.apply(schedule(NAME, **every, suspend=True), ns)
    paused = kube.wait_for("paused", lambda: ready(kube, ns, paused=True), 60)
    assert "nextFireTime" not in paused
    held = client(kubelet, "get-schedule", at, NAME)
    assert held["paused"] is True
    # what comes now was fired before the pause (4 intervals of waiting)
    after = client(kubelet, "receive", at, "ticks", "g", "100", "8")["received"]
    assert all(int(m["headers"][SCHEDULE_TIME]) <= held["last_fire_ms"] for m in after)
    assert client(kubelet, "get-schedule", at, NAME)["fired"] == held["fired"]
    paused_at = held["last_fire_ms"]

    # resumed: it fires again, past the pause
    kube.apply(schedule(NAME, **every), ns)
    kube.wait_for("resumed", lambda: ready(kube, ns, paused=False), 60)
    more = client(kubelet, "receive", at, "ticks", "g", "2", "60")["received"]
    assert len(more) == 2
    assert all(int(m["headers"][SCHEDULE_TIME]) > paused_at for m in more)
    assert "SchedulePaused" in events(kube, ns) and "ScheduleResumed" in events(kube, ns)

    # deleted by other means: the next round makes it again
    client(kubelet, "delete-schedule", at, NAME)
    kube.wait_for("made again", lambda: events(kube, ns).count("ScheduleCreated") == 2, 60)
    assert client(kubelet, "get-schedule", at, NAME)["found"] is True

    # the resource deleted: its finalizer deletes the schedule from the shards
    kube.kubectl("delete", "dsched", NAME, "-n", ns, "--timeout=60s")
    assert kube.get("dsched", NAME, ns) is None
    assert client(kubelet, "get-schedule", at, NAME) == {"found": False}
