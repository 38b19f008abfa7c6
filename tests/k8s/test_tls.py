"""A DelayTopic with ``spec.tls``: its pods (real processes on the local node)
serve TLS on both ports with the Secret's certificate, the operator keeps the
shard through the admin API with its own client certificate (dialling pod IPs,
verifying pod names), the replica streams from its master over mutual TLS, the
kubelet's probes use plain HTTP on the metrics port, a client with the CA is
served and a plaintext one is not, and a renewed Secret reaches the servers
without a restart."""

from __future__ import annotations

import ssl
from typing import Any

from cryptography import x509

from tests.k8s.support.kube import Kube
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.localpods import client, local_topic, pod, read_map, run_client, wait_serving
from tests.k8s.support.podtls import DelayqCa

NAME, SECRET = "secure", "secure-tls"


def _record(kube: Kube, ns: str) -> dict[str, Any]:
    status = (kube.get("dt", NAME, ns) or {}).get("status") or {}
    return dict((status.get("replication") or {}).get("0") or {})


def _served_serial(ip: str, port: int) -> int:
    """The serial number of the certificate the server at ``ip:port`` shows now."""
    pem = ssl.get_server_certificate((ip, port), timeout=5)
    return x509.load_pem_x509_certificate(pem.encode()).serial_number


def test_a_tls_topic_serves_keeps_and_replicates_over_tls(
    kube: Kube, namespace: str, kubelet: LocalKubelet, delayq_ca: DelayqCa
) -> None:
    kube.apply(delayq_ca.topic_secret(SECRET, NAME, namespace, 1), namespace)
    topic = local_topic(NAME, replicasPerShard=2, replication="sync", tls={"secretName": SECRET})
    kube.apply(topic, namespace)
    wait_serving(kube, namespace, NAME, 1)  # probes answered: plain HTTP /readyz
    # promoted and both pods in sync: the operator's Status probes and the replica's
    # stream went over TLS, with client certificates the admin port checked
    kube.wait_for(
        "both pods in sync",
        lambda: len(_record(kube, namespace).get("insync") or []) == 2,
        timeout_s=60,
    )
    # the user's Secret wins: the operator issues none for the topic
    st = (kube.get("dt", NAME, namespace) or {})["status"]["tls"]
    assert (st["mode"], st["secretName"], st["publicTls"]) == ("secret", SECRET, True)
    assert "notAfter" in st and "renewAt" not in st, st
    assert kube.get("secret", f"{NAME}-shard-tls", namespace) is None
    master = read_map(kube, namespace, NAME).shards[0].master  # the pod's DNS name
    tls = delayq_ca.client_env()
    sent = client(kubelet, "schedule", master, NAME, "50", "1", env=tls)
    assert sent["errors"] == [] and len(sent["ids"]) == 50
    got = client(kubelet, "receive", master, NAME, "g", "50", "60", env=tls)["received"]
    assert sorted(m["id"] for m in got) == sorted(sent["ids"])

    plain = run_client(kubelet, "schedule", master, NAME, "1", "1")
    assert plain.returncode != 0 and "UNAVAILABLE" in plain.stderr, plain.stderr[-2000:]

    # a renewed certificate (same CA, new key) reaches the running servers
    ip = pod(kube, namespace, f"{NAME}-shard-0-0")["status"]["podIP"]
    before = _served_serial(ip, 7420)
    renewed = delayq_ca.topic_secret(SECRET, NAME, namespace, 1)
    kube.apply(renewed, namespace)
    kube.wait_for("the renewed certificate served", lambda: _served_serial(ip, 7420) != before, 60)
    again = client(kubelet, "schedule", master, NAME, "1", "1", env=tls)
    assert again["errors"] == [] and len(again["ids"]) == 1
    rt = kubelet.runtime(namespace, f"{NAME}-shard-0-0")
    assert rt is not None and rt.containers[0].restarts == 0
