"""TLS by default: a DelayTopic without TLS settings gets the operator's
certificates (``delayq_operator.issuer``) on a real control plane, its pods real
processes on the local node: the namespace's CA and control certificate, the
topic's certificate naming its pods, mutual TLS on every pod's admin port (a
caller without a certificate, or with another CA's, is refused at the
handshake), the public port plaintext, a SIGKILLed master failed over through
it; ``spec.publicTls`` serves the public port with the CA the ConfigMap
``delayq-ca`` publishes; ``spec.tls.mode: disabled`` says the admin API is
open; a leaf and a CA rotation on live pods under load lose nothing and restart
nothing.

The failover (``test_failover``) and the Spark rebalance (``test_rebalance``)
run on topics without TLS settings: they go through these certificates too.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509

from delayq import pki
from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.tls import TlsConfig, dial
from tests.k8s.support.controlplane import ControlPlane
from tests.k8s.support.kube import Kube, operator_pod_args, start_operator
from tests.k8s.support.kubelet import LocalKubelet
from tests.k8s.support.localpods import (
    client,
    control_env,
    local_topic,
    pod,
    read_map,
    run_client,
    status,
    wait_serving,
)
from tests.k8s.support.podtls import DelayqCa

ADMIN = 7422


def secret(kube: Kube, ns: str, name: str) -> dict[str, bytes]:
    obj = kube.get("secret", name, ns)
    assert obj is not None, f"no Secret {name}"
    return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}


def condition(kube: Kube, ns: str, name: str, kind: str) -> dict[str, Any]:
    found = [c for c in status(kube, ns, name).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else {}


def control_files(kube: Kube, ns: str, where: Path) -> TlsConfig:
    """The namespace's control certificate (the operator's keepers') as files."""
    tls = TlsConfig.from_env(control_env(kube, ns, where))
    assert tls is not None
    return tls


def admin_status(ip: str, host: str, tls: TlsConfig | None) -> apb.StatusResponse:
    """The pod's admin Status, dialled at its IP, its certificate checked for ``host``."""
    with dial(f"{ip}:{ADMIN}", tls, server_name=host) as ch:
        reply: apb.StatusResponse = arpc.ShardAdminStub(ch).Status(apb.StatusRequest(), timeout=10)
        return reply


def served(ip: str) -> x509.Certificate:
    """The certificate the pod's admin port shows (before it asks for the caller's)."""
    pem = ssl.get_server_certificate((ip, ADMIN), timeout=5)
    return x509.load_pem_x509_certificate(pem.encode())


def test_a_topic_without_tls_settings_serves_mutual_tls_on_its_admin_port(
    kube: Kube, namespace: str, kubelet: LocalKubelet, delayq_ca: DelayqCa, tmp_path: Path
) -> None:
    name = "plain"
    kube.apply(local_topic(name, replicasPerShard=2, replication="sync"), namespace)
    wait_serving(kube, namespace, name, 1)
    # the keepers (control certificate) promoted a master and the replica streams
    # from it (the pods' certificate, both ways): every call went through the admin port
    kube.wait_for(
        "both pods in sync",
        lambda: len(((status(kube, namespace, name).get("replication") or {}).get("0") or {})
                    .get("insync") or []) == 2,
        timeout_s=60,
    )  # fmt: skip
    st = status(kube, namespace, name)["tls"]
    assert (st["mode"], st["secretName"], st["publicTls"]) == ("operator", "plain-shard-tls", False)
    assert st["notAfter"] > st["renewAt"]
    cond = condition(kube, namespace, name, "AdminTLS")
    assert (cond["status"], cond["reason"]) == ("True", "MutualTLS"), cond

    ca = secret(kube, namespace, "delayq-ca")
    leaf = secret(kube, namespace, "plain-shard-tls")
    bundle = kube.get("configmap", "delayq-ca", namespace)["data"]["ca.crt"].encode()
    assert bundle == ca["ca.crt"] == leaf["ca.crt"], "one trust bundle, published for clients"
    (ca_cert,) = pki.load_certs(ca["ca.crt"])
    m = read_map(kube, namespace, name)
    host = m.shards[0].admin.rpartition(":")[0]  # the master's pod DNS name
    names = pki.san_names(pki.load_certs(leaf["tls.crt"])[0])
    assert host in names and f"plain-shard-0-pods.{namespace}.svc" in names
    ip = pod(kube, namespace, host.split(".")[0])["status"]["podIP"]
    assert pki.signed_by(served(ip), ca_cert)

    control = control_files(kube, namespace, tmp_path / "control")
    assert admin_status(ip, host, control).role == "master"
    (tmp_path / "ca.crt").write_bytes(bundle)
    refused = {
        "plaintext": None,
        "no certificate": TlsConfig(ca=tmp_path / "ca.crt"),
        "another CA's certificate": TlsConfig(
            ca=tmp_path / "ca.crt",
            cert=delayq_ca.dir / "operator.crt",
            key=delayq_ca.dir / "operator.key",
        ),
    }
    for what, tls in refused.items():
        with pytest.raises(grpc.RpcError) as err:
            admin_status(ip, host, tls)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE, what

    # the public port stays plaintext (no spec.publicTls)
    sent = client(kubelet, "schedule", m.shards[0].master, name, "20", "1")
    assert sent["errors"] == [] and len(sent["ids"]) == 20
    got = client(kubelet, "receive", m.shards[0].master, name, "g", "20", "60")["received"]
    assert sorted(r["id"] for r in got) == sorted(sent["ids"])
    reasons = {e["reason"] for e in kube.items("events", namespace)}
    assert {"CAIssued", "ControlCertificateIssued", "CertificateIssued"} <= reasons, reasons

    # the operator fails a SIGKILLed master over through the admin ports' mutual TLS
    rec = (status(kube, namespace, name).get("replication") or {})["0"]
    master, epoch = rec["master"], rec["epoch"]
    rt = kubelet.runtime(namespace, master)
    assert rt is not None and rt.containers[0].proc is not None
    os.kill(rt.containers[0].proc.pid, signal.SIGKILL)

    def promoted() -> dict[str, Any] | None:
        r = (status(kube, namespace, name).get("replication") or {}).get("0") or {}
        return r if r.get("epoch", 0) > epoch and r.get("inOffice") else None

    new = kube.wait_for("the replica promoted", promoted, timeout_s=30)
    assert new["master"] != master
    kube.wait_for(
        f"{master} back in sync",
        lambda: master in (((status(kube, namespace, name).get("replication") or {})
                            .get("0") or {}).get("insync") or []),
        timeout_s=90,
    )  # fmt: skip


def test_public_tls_serves_the_public_port_with_the_ca_the_configmap_publishes(
    kube: Kube, namespace: str, kubelet: LocalKubelet, tmp_path: Path
) -> None:
    name = "pub"
    kube.apply(local_topic(name, publicTls=True), namespace)
    wait_serving(kube, namespace, name, 1)
    assert status(kube, namespace, name)["tls"]["publicTls"] is True
    bundle = tmp_path / "ca.crt"
    bundle.write_text(kube.get("configmap", "delayq-ca", namespace)["data"]["ca.crt"])
    master = read_map(kube, namespace, name).shards[0].master
    tls = {"DELAYQ_TLS_CA": str(bundle)}
    sent = client(kubelet, "schedule", master, name, "10", "1", env=tls)
    assert sent["errors"] == [] and len(sent["ids"]) == 10
    plain = run_client(kubelet, "schedule", master, name, "1", "1")
    assert plain.returncode != 0 and "UNAVAILABLE" in plain.stderr, plain.stderr[-2000:]


def test_tls_mode_disabled_warns_that_the_admin_api_is_open(
    kube: Kube, namespace: str, kubelet: LocalKubelet
) -> None:
    name = "open"
    kube.apply(local_topic(name, tls={"mode": "disabled"}), namespace)
    wait_serving(kube, namespace, name, 1)
    cond = kube.wait_for(
        "the AdminTLS warning",
        lambda: (
            (c := condition(kube, namespace, name, "AdminTLS")).get("reason") == "Disabled" and c
        ),
    )
    assert cond["status"] == "False" and "open" in cond["message"]
    assert status(kube, namespace, name)["tls"] == {"mode": "disabled", "publicTls": False}
    warned = [e for e in kube.items("events", namespace) if e["reason"] == "Disabled"]
    assert warned and warned[0]["type"] == "Warning"
    assert kube.get("secret", "open-shard-tls", namespace) is None
    host = read_map(kube, namespace, name).shards[0].admin.rpartition(":")[0]
    ip = pod(kube, namespace, host.split(".")[0])["status"]["podIP"]
    assert admin_status(ip, host, None).role == "master", "plaintext admin port"


@pytest.fixture
def short_lived(kube: Kube, control_plane: ControlPlane) -> Iterator[str]:
    """A namespace of an operator of its own whose certificates live seconds: leaves
    20 s (renewed at about 13 s), the CA 45 s (rotated at 30 s), settle 3 s."""
    ns = f"dqca-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", ns)
    op = start_operator(
        kube.kubeconfig,
        control_plane.logs / f"operator-{ns}.log",
        "--standalone", "--namespace", ns,
        "--leaf-lifetime", "20s", "--ca-lifetime", "45s", "--cert-settle", "3s",
        "--certs-dir", str(control_plane.root / f"certs-{ns}"),
        *operator_pod_args(),
    )  # fmt: skip
    try:
        yield ns
    finally:
        op.stop()
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_leaf_and_ca_rotation_on_live_pods_under_load_lose_nothing(
    kube: Kube, short_lived: str, kubelet: LocalKubelet, tmp_path: Path
) -> None:
    ns, name = short_lived, "rot"
    kube.apply(local_topic(name, replicasPerShard=2, replication="sync"), ns)
    wait_serving(kube, ns, name, 1)
    first_ca = pki.load_certs(secret(kube, ns, "delayq-ca")["ca.crt"])[0]
    entry = f"{pod(kube, ns, f'{name}-shard-0-1')['status']['podIP']}:7420"
    stop = tmp_path / "stop"
    load = kubelet.start_in_cluster(
        [sys.executable, "-m", "tests.k8s.support.incluster", "load", entry, name, str(stop)]
    )
    try:

        def rotated() -> bool:
            reasons = [e["reason"] for e in kube.items("events", ns)]
            return "CAPreviousDropped" in reasons and "CertificateRenewed" in reasons

        kube.wait_for("a leaf renewed and the CA rotated and settled", rotated, timeout_s=150)
        time.sleep(3)  # load on the new certificates
    finally:
        stop.touch()
        out, err = load.communicate(timeout=180)
    assert load.returncode == 0, err[-3000:]
    found = json.loads(out.strip().splitlines()[-1])
    assert (found["lost"], found["early"], found["cancel_broken"]) == (0, 0, 0), found
    assert found["acked"] > 100, found
    ca = secret(kube, ns, "delayq-ca")
    assert "previous.crt" not in ca
    (new_ca,) = pki.load_certs(ca["ca.crt"])
    assert pki.fingerprint(new_ca) != pki.fingerprint(first_ca)
    rec = (status(kube, ns, name).get("replication") or {}).get("0") or {}
    assert rec.get("failovers", 0) == 0 and len(rec.get("insync") or []) == 2, rec
    for ordinal in (0, 1):
        pod_name = f"{name}-shard-0-{ordinal}"
        ip = pod(kube, ns, pod_name)["status"]["podIP"]
        kube.wait_for(
            f"{pod_name} serves a certificate of the new CA",
            lambda ip=ip: pki.signed_by(served(ip), new_ca),
            timeout_s=30,
        )
        rt = kubelet.runtime(ns, pod_name)
        assert rt is not None and rt.containers[0].restarts == 0, "a rotation restarts nothing"
    print(
        f"rotation under load: {found['acked']} acked, {found['received']} received, "
        f"errors {found['errors']}; events {[e['reason'] for e in kube.items('events', ns)]}"
    )
