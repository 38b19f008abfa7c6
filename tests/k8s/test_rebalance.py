"""A change of ``spec.shards`` on the local Kubernetes, with real processes: a
DelayTopic of 2 shards (two pods each, async) holding 3,000 keyed pending messages
(30,000 with ``--long``, or ``DELAYQ_K8S_REBALANCE_MESSAGES``) goes to 3 shards
and back to 2. The rebalance Job's pod runs ``delayq-spark rebalance`` for real
on the local node (``tests/k8s/support/kubelet.py``).

In order (one topic for the module):
1. 2 -> 3 with a ``spec.spark.master`` Spark refuses (``local[0]``) and no pod
   retries: the Job fails; the shard map does not switch (shard 2 stays
   joining, keys hash over 2 shards, no message moved); phase RebalanceFailed,
   ``status.rebalance`` names the Job and why, a RebalanceFailed event. (An
   unreachable ``spark://`` master fails the same way, after Spark's three
   20-second tries to register: a minute per attempt this test need not spend.)
2. The spec fixed: a new Job at once; the map switches once it succeeded; every
   message pending exactly once, each keyed one on its key's owner of 3.
3. 3 -> 2: the map switches, shard 2 is drained, dropped and removed (its
   StatefulSet, Services and record gone, its volume claim retained); every
   message once on its owner of 2, and every old id still looks up. A client
   refreshing its route from shard 0 all along is never sent to the stopped
   shard: its pods go only once every kept pod serves the map without it (the
   local kubelet syncing ConfigMaps slowly meanwhile, as a real one does).
4. 2 -> 3 again, shard 0's master SIGKILLed once the Job has begun moving: the
   shard fails over (the map's epoch rises under the Job), and the change still
   completes, in one go; shard 2 came back on its kept volume;
   every message once on its owner of 3 (moved a third time), every old id still
   looks up.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delayq import pki
from delayq.control.stats import shard_stats
from delayq.shardmap import JOINING, shard_of_key
from delayq_operator.spec import PORT_DEFAULT
from tests.k8s.support import volumes
from tests.k8s.support.kube import Kube, OperatorProcess
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.localpods import (
    TOPIC,
    address,
    client,
    control_env,
    local_topic,
    read_map,
    status,
    wait_ready,
)
from tests.k8s.support.pods import NODE
from tests.support.sizes import size

pytestmark = pytest.mark.long

NAME = "moves"
MESSAGES = size("DELAYQ_K8S_REBALANCE_MESSAGES", ci=3000, long=30_000)
REFUSED = "local[0]"
"""A Spark master Spark refuses at once ("Asked to run locally with 0 threads")."""
JOB_S = 240.0
"""Enough for a rebalance Job on a loaded 2-core machine."""


PODS = 2
"""Pods a shard (async): a master killed mid-rebalance fails over to the other."""


def topic_spec(**spec: Any) -> dict[str, Any]:
    return local_topic(NAME, replicasPerShard=PODS, **spec)


def say(what: str, t0: float = time.monotonic()) -> None:
    print(f"[{time.monotonic() - t0:6.1f}s] {what}", flush=True)


def events(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return [e for e in kube.items("events", ns) if e["involvedObject"].get("kind") == "DelayTopic"]


def exported(kube: Kube, kubelet: LocalKubelet, ns: str) -> list[dict[str, Any]]:
    """Every shard's pending messages, as the rebalance job reads them (through the
    admin ports, with the namespace's control certificate)."""
    env = control_env(kube, ns)
    rows: list[dict[str, Any]] = client(kubelet, "export", entry(kube, ns), env=env)["rows"]
    return rows


def entry(kube: Kube, ns: str) -> str:
    return address(kube, ns, f"{NAME}-shard-0-0")


def assert_on_owners(rows: list[dict[str, Any]], owners: int) -> None:
    count = Counter(r["body"] for r in rows)
    assert set(count) == {f"m{i}" for i in range(MESSAGES)}, "nothing lost"
    assert max(count.values()) == 1, "each pending exactly once"
    misplaced = [r for r in rows if r["shard"] != shard_of_key(r["key"], owners)]
    assert not misplaced, f"{len(misplaced)} not on their key's owner of {owners}: {misplaced[:3]}"


def change_done(kube: Kube, ns: str, to: int) -> dict[str, Any] | None:
    s = status(kube, ns, NAME)
    r = s.get("rebalance") or {}
    return s if (r.get("to"), r.get("step"), s.get("phase")) == (to, "done", "Ready") else None


@pytest.fixture(scope="module")
def topic(
    kube: Kube, operator: OperatorProcess, kubelet: LocalKubelet, request: pytest.FixtureRequest
) -> Iterator[tuple[str, list[str]]]:
    """The 2-shard topic, serving, with MESSAGES keyed messages due in an hour:
    (namespace, their ids)."""
    ns = f"dq-rb-{os.getpid()}"
    kube.kubectl("create", "namespace", ns)
    failed = request.session.testsfailed
    kube.apply(topic_spec(shards=2), ns)
    wait_ready(kube, ns, NAME, 2, timeout_s=JOB_S)  # (four pods on a loaded machine)
    say("2 shards serving")
    sent = client(kubelet, "schedule", entry(kube, ns), NAME, str(MESSAGES), "3600")
    say(f"{MESSAGES} sent")
    assert sent["errors"] == [] and len(sent["ids"]) == MESSAGES and sent["shards"] == [0, 1]
    yield ns, sent["ids"]
    if request.session.testsfailed > failed:
        print(f"--- status ---\n{json.dumps(status(kube, ns, NAME), indent=1)}")
        for pod in kube.items("pods", ns, **{"delayq.io/job": "rebalance"}):
            name = pod["metadata"]["name"]
            print(f"--- {name}: {pod['status'].get('phase')} ---")
            print("".join(kubelet.logs(ns, name))[-3000:])
        print(f"--- operator log tail ---\n{operator.tail(150)}")
    kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_failed_rebalance_job_leaves_the_topology_as_it_was(
    kube: Kube, kubelet: LocalKubelet, topic: tuple[str, list[str]]
) -> None:
    ns, _ = topic
    before = read_map(kube, ns, NAME)
    failing = {"master": REFUSED, "backoffLimit": 0}
    kube.apply(topic_spec(shards=3, spark=failing), ns)
    s = kube.wait_for(
        "the rebalance job failed",
        lambda: (st := status(kube, ns, NAME)).get("phase") == "RebalanceFailed" and st,
        timeout_s=JOB_S,
    )
    say("the job failed")
    r = s["rebalance"]
    job = f"{NAME}-rebalance-e{before.topology_epoch}-to3"
    assert (r["step"], r["from"], r["to"], r["job"], r["failed"]) == ("rebalance", 2, 3, job, True)
    assert r["attempts"] == 1, "backoffLimit 0: one pod"
    assert r["lastError"].endswith("(exit code 1)"), r["lastError"]
    assert "Asked to run locally with 0 threads" in r["lastError"], r["lastError"]
    (cond,) = [c for c in s["conditions"] if c["type"] == "Rebalanced"]
    assert (cond["status"], cond["reason"]) == ("False", "JobFailed")
    assert r["lastError"] in cond["message"]
    kube.wait_for(
        "a RebalanceFailed warning",
        lambda: any(
            e["reason"] == "RebalanceFailed" and e["type"] == "Warning" and job in e["message"]
            for e in events(kube, ns)
        ),
    )
    # the Job's pod ran for real on the local node, and failed
    (pod,) = kube.items("pods", ns, **{"job-name": job})
    assert (pod["spec"]["nodeName"], pod["status"]["phase"]) == (NODE, "Failed")
    # the topology as it was: shard 2 joining, owning no key, nothing moved to it
    m = read_map(kube, ns, NAME)
    assert (m.count, m.owners, m.changing) == (3, 2, JOINING)
    assert m.shards[:2] == before.shards[:2] or m.topology_epoch > before.topology_epoch
    rows = exported(kube, kubelet, ns)
    assert_on_owners(rows, 2)
    assert {r["shard"] for r in rows} == {0, 1}
    assert s["readyShards"] == "3/3", "the joining shard serves"
    # its pods were created with the topic's certificate already naming them
    # (the operator's CA: no TLS settings), and serve it on their admin port
    leaf = base64.b64decode(kube.get("secret", f"{NAME}-shard-tls", ns)["data"]["tls.crt"])
    names = pki.san_names(pki.load_certs(leaf)[0])
    assert f"{NAME}-shard-2-0.{NAME}-shard-2-pods.{ns}.svc" in names


def test_the_fixed_spec_reruns_the_job_and_the_map_switches_once_it_succeeded(
    kube: Kube, kubelet: LocalKubelet, topic: tuple[str, list[str]]
) -> None:
    ns, ids = topic
    failed = status(kube, ns, NAME)["rebalance"]["job"]
    kube.apply(topic_spec(shards=3), ns)  # spec.spark back to local[2]
    s = kube.wait_for("3 shards active", lambda: change_done(kube, ns, 3), timeout_s=JOB_S)
    wait_ready(kube, ns, NAME, 3)
    say("3 shards active")
    r = s["rebalance"]
    assert r["job"] == f"{failed}-r1", "retried at once: the spec it failed with changed"
    assert (r["failed"], r["attempts"]) == (False, 2)
    assert [c["status"] for c in s["conditions"] if c["type"] == "Rebalanced"] == ["True"]
    job = kube.get("job", r["job"], ns)
    assert {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"} >= {"Complete"}
    (pod,) = kube.items("pods", ns, **{"job-name": r["job"]})
    assert (pod["spec"]["nodeName"], pod["status"]["phase"]) == (NODE, "Succeeded")
    m = read_map(kube, ns, NAME)
    assert (m.count, m.owners, m.changing) == (3, 3, "")
    reasons = [e["reason"] for e in events(kube, ns)]
    assert {"ShardsAdded", "RebalanceStarted", "RebalanceSucceeded"} <= set(reasons), reasons
    rows = exported(kube, kubelet, ns)
    assert_on_owners(rows, 3)
    assert 2 in {r["shard"] for r in rows}, "some moved to the new shard"
    states = client(kubelet, "lookup", entry(kube, ns), *ids)["states"]
    assert Counter(states) == {"pending": MESSAGES}, "every old id still looks up"


SLOW_SYNC_S = 8.0
"""The local kubelet's ConfigMap sync period during the scale-down: a real one
takes up to a minute, so that the kept pods serve the smaller map a while after
it was written (the window in which a shard stopped at once would still be named
by the map a client fetches)."""


def test_scaling_down_drains_and_removes_the_shard(
    kube: Kube,
    kubelet: LocalKubelet,
    topic: tuple[str, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns, ids = topic
    monkeypatch.setattr(volumes, "VOLUME_SYNC_S", SLOW_SYNC_S)
    stop = tmp_path / "stop-routes"
    routes = kubelet.start_in_cluster(
        [sys.executable, "-m", "tests.k8s.support.incluster", "routes", entry(kube, ns), str(stop)]
    )
    try:
        kube.apply(topic_spec(shards=2), ns)
        s = kube.wait_for("2 shards active", lambda: change_done(kube, ns, 2), timeout_s=JOB_S)
    finally:
        stop.touch()
        out, err = routes.communicate(timeout=60)
    assert routes.returncode == 0, err[-3000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["stale"] == [], "a refreshed route named a stopped shard"
    assert seen["shards"] == [2, 3], seen
    wait_ready(kube, ns, NAME, 2)
    say("2 shards active")
    m = read_map(kube, ns, NAME)
    assert (m.count, m.owners) == (2, 2)
    assert s["rebalance"]["job"].endswith("-to2") and not s["rebalance"]["failed"]
    kube.wait_for(
        "shard 2's objects and record gone",
        lambda: (
            kube.get("statefulset", f"{NAME}-shard-2", ns) is None
            and kube.get("service", f"{NAME}-shard-2", ns) is None
            and kube.get("service", f"{NAME}-shard-2-pods", ns) is None
            and "2" not in (status(kube, ns, NAME).get("replication") or {})
            and not kube.items("pods", ns, **{TOPIC: NAME, "delayq.io/shard": "2"})
        ),
    )
    assert kube.get("pvc", f"data-{NAME}-shard-2-0", ns) is not None, "pvcRetention: Retain"
    reasons = [e["reason"] for e in events(kube, ns)]
    assert "ShardsDrained" in reasons, reasons
    rows = exported(kube, kubelet, ns)
    assert_on_owners(rows, 2)
    say("checked")
    states = client(kubelet, "lookup", entry(kube, ns), *ids)["states"]
    assert Counter(states) == {"pending": MESSAGES}, "old ids, moved once or twice, look up"


def wait_for_moves(kube: Kube, ns: str) -> None:
    """Until the rebalance Job runs and shard 2 holds moved messages."""

    def moving() -> bool:
        if not kube.items("pods", ns, **{"delayq.io/job": "rebalance"}):
            return False
        master = (status(kube, ns, NAME).get("replication") or {}).get("2", {}).get("master")
        pod = (kube.get("pod", master, ns) if master else None) or {}
        ip = (pod.get("status") or {}).get("podIP")
        got = shard_stats(f"{ip}:{PORT_DEFAULT}") if ip else None
        return got is not None and sum(int(t["pending"]) for t in got.topics) > 0

    kube.wait_for("the Job moving messages to shard 2", moving, timeout_s=JOB_S)


def test_a_master_killed_mid_rebalance_does_not_stop_the_change(
    kube: Kube, kubelet: LocalKubelet, topic: tuple[str, list[str]]
) -> None:
    """2 -> 3 again. Shard 2 comes back on its retained claim: its old log
    (everything on it was moved away) and the ids it once imported; it is founded
    afresh. Shard 0's master is SIGKILLed while the Job moves messages: the shard
    fails over, the map's epoch rises under the Job, and the change carries on to
    the end."""
    ns, ids = topic
    record = status(kube, ns, NAME)["replication"]["0"]
    kube.apply(topic_spec(shards=3), ns)
    wait_for_moves(kube, ns)
    rt = kubelet.runtime(ns, record["master"])
    assert rt is not None and rt.containers[0].proc is not None
    os.kill(rt.containers[0].proc.pid, signal.SIGKILL)
    say("shard 0's master killed")
    s = kube.wait_for(
        "3 shards active again", lambda: change_done(kube, ns, 3), timeout_s=2 * JOB_S
    )
    wait_ready(kube, ns, NAME, 3)
    say("3 shards active again")
    assert s["replication"]["0"]["epoch"] > record["epoch"], "shard 0 failed over"
    assert s["replication"]["2"]["epoch"] > 2, "founded above the epochs its old log holds"
    rows = exported(kube, kubelet, ns)
    assert_on_owners(rows, 3)
    states = client(kubelet, "lookup", entry(kube, ns), *ids)["states"]
    assert Counter(states) == {"pending": MESSAGES}
