"""A DelayTopic's RocketMQ 5 port on Kubernetes: the official Java client
(``tests/rocketmq/javaclient.py``, rocketmq-client-java 5.2.0) runs as a client
inside the cluster (``LocalKubelet.in_cluster_command``: the cluster's DNS on
/etc/hosts), its endpoint the Service ``rocketmq`` port of the topic's shard 0.
Its route sends it to each shard's master pod by the pod's DNS name (the shard
map's ``rocketmq``); a Producer sends a NORMAL and a DELAY message (one per shard:
5.2.0's producer takes the queues round robin, one a send) and a SimpleConsumer
receives both through the other shard's route too, never before due."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from delayq.addresses import METRICS_PORT
from tests.k8s.support.kube import Kube
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.localpods import local_topic, pod, read_map, wait_ready
from tests.rocketmq.javaclient import Drivers, of, sent_by_id

NAME, SHARDS, GROUP = "rmq", 2, "billing"
DELAY_MS = 3000


def _counter(kube: Kube, ns: str, pod_name: str, name: str) -> float:
    """A counter of the pod's /metrics (its metrics port at the pod's IP)."""
    ip = pod(kube, ns, pod_name)["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:{METRICS_PORT}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"no {name} on {pod_name}'s /metrics"
    return float(found[1])


def test_a_java_producer_and_simple_consumer_round_trip_through_the_service(
    kube: Kube, namespace: str, kubelet: LocalKubelet, tmp_path: Path
) -> None:
    kube.apply(local_topic(NAME, shards=SHARDS), namespace)
    wait_ready(kube, namespace, NAME, SHARDS)
    service = kube.get("service", f"{NAME}-shard-0", namespace)
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == "rocketmq"]
    assert (port["port"], port["targetPort"]) == (7423, "rocketmq")
    host = f"{NAME}-shard-0.{namespace}.svc"
    masters = [f"{NAME}-shard-{i}-0" for i in range(SHARDS)]
    assert [s.rocketmq for s in read_map(kube, namespace, NAME).shards] == [
        f"{m}.{NAME}-shard-{i}-pods.{namespace}.svc:7423" for i, m in enumerate(masters)
    ], "routes name each shard's master pod"
    kube.wait_for(  # the master Service has an endpoint once the role label is on
        f"{host} in the cluster's DNS", lambda: f" {host}\n" in kubelet.hosts.read_text()
    )

    drivers = Drivers(
        f"{host}:{port['port']}", tmp_path / "client-logs", launch=kubelet.in_cluster_command
    )
    try:
        consuming = drivers.start("simple-consume", NAME, "--group", GROUP, "--count", "2")
        consuming.wait_for("started")
        sent = sent_by_id(
            drivers.run(
                "produce", NAME, "--normal", "1", "--delay", "1", "--delay-ms", str(DELAY_MS)
            )
        )
        received = of(consuming.result(), "received")
    finally:
        drivers.close()

    assert len(sent) == 2
    assert sorted(r["message_id"] for r in received) == sorted(sent), "each exactly once"
    for r in received:
        s = sent[r["message_id"]]
        assert r["body"] == f"m-{s['kind']}-{s['index']}"
        if s["kind"] == "delay":
            assert r["delivery_ms"] == s["due_ms"]
            assert r["ms"] >= s["due_ms"], f"received {s['due_ms'] - r['ms']} ms before due"
    # one message on each shard's master: the route of each was used
    assert [_counter(kube, namespace, m, "delayq_scheduled_total") for m in masters] == [1, 1]
    assert [_counter(kube, namespace, m, "delayq_early_total") for m in masters] == [0, 0]
