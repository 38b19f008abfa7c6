"""Push groups (``spec.groups[].push``, ``spec.pushEgress``) against a real
kube-apiserver: the CRD's schema refuses a bad target at ``kubectl apply``,
naming the field; an operator run as in the cluster sets a push group whose
Secret it never reads on a topic whose pods are real ``delayq serve``
processes: the pods mount the Secret and get the push flags, the shard holds
the target as declared, the shard's master pushes every message scheduled to
a receiver on this machine (allowed by ``spec.pushEgress.allow``: the pods
share its network), none early, each signed with the mounted Secret (verified
by the Standard Webhooks library) and sent with the URL's credentials; the
Secret rotated (a new key, the old one kept) reaches the running server in
place: requests signed by both keys, no pod restarted; a group whose Secret
does not exist yet holds no pod back, its set is refused naming the reference
until the Secret is made, then it pushes; neither the status nor the events
hold a secret or those credentials."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from delayq_operator.pushspec import PUSH_DIR
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

NAME = "pushed"
SECRET = "hook-signing"
RAW = b"delayq-k8s-push-test-signing-key"
KEY = "whsec_" + base64.b64encode(RAW).decode()
NEW_RAW = b"delayq-k8s-push-test-rotated-key"
NEW_KEY = "whsec_" + base64.b64encode(NEW_RAW).decode()
KEYS = {"new": NEW_KEY, "old": KEY}
LATER = "not-yet"
"""A Secret made only once the topic runs."""
URL = "http://bob:hunter2@127.0.0.1:{port}/in?token=s3cr3t"
PUSH = {
    "url": URL.format(port=9),
    "method": "PUT",
    "headers": {"X-Tenant": "acme"},
    "timeout": "5s",
    "secretRef": {"name": SECRET},
}
MESSAGES = 20


def bad(group_push: dict[str, Any]) -> dict[str, Any]:
    return local_topic("bad", groups=[{"name": "g", "push": group_push}])


@pytest.mark.parametrize(
    ("topic", "message"),
    [
        (bad({"method": "POST"}), "spec.groups[0].push.url: Required value"),
        (bad({"url": "ftp://host/x"}), "spec.groups[0].push.url: Invalid value"),
        (bad({"url": "http://h/x", "method": "GET"}), "spec.groups[0].push.method: Unsupported"),
        (bad({"url": "http://h/x", "timeout": "61s"}), "must be from 100ms to 60s"),
        (bad({"url": "http://h/x", "timeout": "50ms"}), "must be from 100ms to 60s"),
        (
            bad({"url": "http://h/x", "secretRef": {"name": "Not_A_Name"}}),
            "spec.groups[0].push.secretRef.name: Invalid value",
        ),
        (bad({"url": "http://h/x", "secretRef": {}}), "spec.groups[0].push.secretRef.name"),
        (
            bad({"url": "http://h/x", "secretRef": {"name": "s", "key": "..data"}}),
            "spec.groups[0].push.secretRef.key: Invalid value",
        ),
        (
            local_topic("bad", pushEgress={"allow": ["10.0.0.0/8", "nope"]}),
            "spec.pushEgress.allow[1]: Invalid value",
        ),
    ],
)
def test_bad_push_targets_are_refused_at_apply(
    kube: Kube, namespace: str, topic: dict[str, Any], message: str
) -> None:
    proc = kube.apply(topic, namespace, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert kube.get("dt", "bad", namespace) is None


def test_a_good_push_group_is_stored_as_written(kube: Kube, namespace: str) -> None:
    groups = [{"name": "hooks", "push": PUSH}, {"name": "pull"}]
    egress = {"allow": ["127.0.0.1/32", "fd00::/8"]}
    kube.apply(local_topic("good", groups=groups, pushEgress=egress), namespace)
    spec = kube.get("dt", "good", namespace)["spec"]
    assert (spec["groups"], spec["pushEgress"]) == (groups, egress)


@pytest.fixture
def in_cluster(kube: Kube, control_plane: ControlPlane, kubelet: LocalKubelet) -> Iterator[str]:
    with in_cluster_operator(kube, kubelet, control_plane.logs, "push") as ns:
        yield ns


class Receiver:
    """An HTTP receiver on this machine (the pods share its network) that answers
    200 and records each request: its message id, body, which of ``KEYS`` the
    Standard Webhooks library verifies its signature with, how many signatures
    it carries, its Basic auth, path and extra header, and how early it came
    (its due time less its arrival)."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # (http.server's names)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                verified = tuple(
                    k for k, key in sorted(KEYS.items()) if _verifies(key, body, headers)
                )
                got.append(
                    {
                        "id": headers.get("webhook-id", ""),
                        "body": body.decode(errors="replace"),
                        "verified": verified,
                        "sigs": len(headers.get("webhook-signature", "").split()),
                        "method": self.command,
                        "auth": headers.get("authorization", ""),
                        "path": self.path,
                        "tenant": headers.get("x-tenant", ""),
                        "early_ms": int(headers.get("delayq-due-ms") or 0)
                        - int(time.time() * 1000),
                    }
                )
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            do_PUT = do_POST

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _verifies(key: str, body: bytes, headers: dict[str, str]) -> bool:
    try:
        Webhook(key).verify(body, headers, json_parse=False)
    except WebhookVerificationError:
        return False
    return True


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}


def test_a_push_group_pushes_with_its_secret_mounted_and_never_shown(
    kube: Kube, kubelet: LocalKubelet, in_cluster: str, receiver: Receiver
) -> None:
    ns = in_cluster
    url = URL.format(port=receiver.port)
    later_url = f"http://127.0.0.1:{receiver.port}/later"
    kube.apply(secret(SECRET, {"current": KEY}), ns)
    topic = local_topic(
        NAME,
        groups=[
            {"name": "hooks", "push": {**PUSH, "url": url}},
            {"name": "pull"},
            {"name": "later", "push": {"url": later_url, "secretRef": {"name": LATER, "key": "k"}}},
        ],
        pushEgress={"allow": ["127.0.0.1/32"]},
    )
    kube.apply(topic, ns)
    wait_ready(kube, ns, NAME, 1)

    # the pods: each Secret mounted read-only (optional: the missing one holds no
    # pod back), the server's push flags
    template = kube.get("statefulset", f"{NAME}-shard-0", ns)["spec"]["template"]["spec"]
    (container,) = template["containers"]
    mounts = [m for m in container["volumeMounts"] if m["mountPath"].startswith(PUSH_DIR)]
    volumes = {v["name"]: v for v in template["volumes"]}
    assert sorted(m["mountPath"] for m in mounts) == [f"{PUSH_DIR}/{SECRET}", f"{PUSH_DIR}/{LATER}"]
    for m in mounts:
        secret_volume = volumes[m["name"]]["secret"]
        assert m["readOnly"] is True and secret_volume["optional"] is True
        assert m["mountPath"] == f"{PUSH_DIR}/{secret_volume['secretName']}"
    args = container["args"]
    assert args[args.index("--push-secret-dir") + 1] == PUSH_DIR
    assert args[args.index("--push-allow") + 1] == "127.0.0.1/32"

    def entries() -> dict[str, dict[str, Any]]:
        return {g["name"]: g for g in status(kube, ns, NAME).get("groups") or []}

    def applied_but_later() -> dict[str, dict[str, Any]] | None:
        got = entries()
        done = set(got) == {"hooks", "pull", "later"} and got["hooks"]["applied"]
        return got if done and got["pull"]["applied"] and "message" in got["later"] else None

    got = kube.wait_for("two groups applied, the third refused", applied_but_later, 120)
    target = f"http://127.0.0.1:{receiver.port}/in"
    assert got["hooks"]["push"] == {"target": target, "secretRef": SECRET}
    assert "push" not in got["pull"]
    assert got["later"]["applied"] is False and f"{LATER}/k" in got["later"]["message"]

    # the shard holds the target as declared (the Secret by name only)
    at = address(kube, ns, f"{NAME}-shard-0-0")
    held = client(kubelet, "groups", at, NAME)["groups"]
    assert held["hooks"]["policy"]["push"] == {
        "url": url,
        "method": "PUT",
        "headers": {"X-Tenant": "acme"},
        "timeout_ms": 5000,
        "ca_bundle": "",
        "secret_ref": SECRET,
    }
    assert held["pull"]["policy"]["push"] is None

    # the master pushes each message scheduled, signed with the mounted Secret
    sent = client(kubelet, "schedule", at, NAME, str(MESSAGES), "1")
    assert not sent["errors"] and len(sent["ids"]) == MESSAGES

    def arrived() -> set[str] | None:
        ids = {r["id"] for r in receiver.got}
        return ids if ids >= set(sent["ids"]) else None

    kube.wait_for(f"{MESSAGES} messages pushed", arrived, 60)
    first = {r["id"]: r for r in reversed(receiver.got)}  # (a duplicate may follow)
    assert sorted(first[i]["body"] for i in sent["ids"]) == sorted(f"m{i}" for i in range(MESSAGES))
    basic = "Basic " + base64.b64encode(b"bob:hunter2").decode()
    for r in receiver.got:
        assert (r["verified"], r["sigs"]) == (("old",), 1), r
        assert r["early_ms"] <= 0, r
        assert (r["auth"], r["path"], r["tenant"]) == (basic, "/in?token=s3cr3t", "acme"), r
        assert r["method"] == "PUT", r

    # the Secret rotated: a new key first, the old one kept; the kubelet swaps the
    # files in place and the server reads them again: both signatures, no restart
    pod = kube.get("pod", f"{NAME}-shard-0-0", ns)
    kube.apply(secret(SECRET, {"current": NEW_KEY, "previous": KEY}), ns)

    def signed_by_both() -> dict[str, Any] | None:
        (one,) = client(kubelet, "schedule", at, NAME, "1", "0")["ids"]
        came = kube.wait_for(
            "a message pushed", lambda: [r for r in receiver.got if r["id"] == one]
        )
        return next((r for r in came if (r["verified"], r["sigs"]) == (("new", "old"), 2)), None)

    kube.wait_for("a push signed by the new and the old key", signed_by_both, 90)
    assert all(r["verified"] for r in receiver.got)
    again = kube.get("pod", f"{NAME}-shard-0-0", ns)
    assert again["metadata"]["uid"] == pod["metadata"]["uid"]
    assert again["status"]["containerStatuses"][0]["restartCount"] == 0

    # the missing Secret made: the refused group is set and pushes, signed by it
    kube.apply(secret(LATER, {"k": NEW_KEY}), ns)
    kube.wait_for("the third group applied", lambda: entries()["later"]["applied"], 120)

    client(kubelet, "schedule", at, NAME, "1", "0")

    def pushed_later() -> list[dict[str, Any]]:
        return [r for r in receiver.got if r["path"] == "/later"]

    for r in kube.wait_for("messages pushed to the third group's target", pushed_later, 60):
        assert (r["verified"], r["sigs"], r["auth"], r["method"]) == (("new",), 1, "", "POST"), r

    # nothing the operator writes holds the secret or the URL's credentials
    shown = json.dumps(status(kube, ns, NAME)) + json.dumps(kube.items("events", ns))
    for text in (KEY, NEW_KEY, RAW.decode(), NEW_RAW.decode(), "hunter2", "s3cr3t"):
        assert text not in shown
