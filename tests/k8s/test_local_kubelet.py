"""The local kubelet's pure pieces: the kubelet's ``$(VAR)`` expansion, fieldRef
values, its one translation (all of a pod's addresses is its IP), what a
container's exit means under the pod's ``restartPolicy``, an httpGet probe's
port and verdict; one container started for real by its podinit; and pods on
the real API server: Secret volumes (content, mode, fsGroup, read-only, an
update reaching the running container, a missing Secret holding the pod back)
and httpGet readiness probes."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.support.containers import http_probe, probe_port
from tests.k8s.support.controlplane import Certificates
from tests.k8s.support.kube import Kube
from tests.k8s.support.kubelet import LocalKubelet, pod_selector
from tests.k8s.support.pods import (
    PODINIT,
    ROOT,
    VENV_BIN,
    ContainerConfigError,
    bind_pod_ip,
    expand,
    field_ref,
    pod_phase,
    restarts,
    with_entry,
)

POD = {
    "metadata": {
        "name": "t-shard-0-0",
        "namespace": "dq-1",
        "uid": "u-1",
        "labels": {"delayq.io/shard": "0"},
    },
    "spec": {"nodeName": "local-node-0"},
}


def test_expansion_is_the_kubelets() -> None:
    env = {"POD_NAME": "p-0", "PORT": "7420"}
    assert expand("$(POD_NAME).svc:$(PORT)", env) == "p-0.svc:7420"
    assert expand("$(UNSET)-x", env) == "$(UNSET)-x", "undefined: left as written"
    assert expand("$$(POD_NAME)", env) == "$(POD_NAME)", "$$ escapes"
    assert expand("a$b", env) == "a$b"


def test_field_refs() -> None:
    assert field_ref(POD, "metadata.name", "127.1.0.9") == "t-shard-0-0"
    assert field_ref(POD, "metadata.namespace", "127.1.0.9") == "dq-1"
    assert field_ref(POD, "status.podIP", "127.1.0.9") == "127.1.0.9"
    assert field_ref(POD, "spec.nodeName", "127.1.0.9") == "local-node-0"
    assert field_ref(POD, "metadata.labels['delayq.io/shard']", "127.1.0.9") == "0"
    with pytest.raises(ContainerConfigError, match=r"status\.phase"):
        field_ref(POD, "status.phase", "127.1.0.9")


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("0.0.0.0:7420", "127.1.0.9:7420"),
        ("[::]:7421", "127.1.0.9:7421"),
        ("--listen=0.0.0.0:7420", "--listen=127.1.0.9:7420"),
        ("127.0.0.1:7420", "127.0.0.1:7420"),
        ("10.0.0.0:7420", "10.0.0.0:7420"),
        ("p-0.t-shard-0-pods.dq-1.svc:7420", "p-0.t-shard-0-pods.dq-1.svc:7420"),
        ("/data/0.0.0.0", "/data/0.0.0.0"),
    ],
)
def test_only_the_any_address_becomes_the_pod_ip(given: str, want: str) -> None:
    assert bind_pod_ip(given, "127.1.0.9") == want


def test_restart_policy() -> None:
    assert restarts("Always", 0) and restarts("Always", 1)
    assert restarts("OnFailure", 1) and not restarts("OnFailure", 0)
    assert not restarts("Never", 0) and not restarts("Never", 1)


def test_pod_phase_follows_its_containers_final_states() -> None:
    ok, failed = {"exitCode": 0}, {"exitCode": 1}
    assert pod_phase(False, [None]) == "Pending"
    assert pod_phase(True, [None]) == "Running"
    assert pod_phase(True, [ok, None]) == "Running", "one still runs"
    assert pod_phase(True, [ok]) == "Succeeded"
    assert pod_phase(True, [ok, failed]) == "Failed"


def test_the_images_user_is_added_unless_taken() -> None:
    passwd = "root:x:0:0:root:/root:/bin/bash\n"
    user = "delayq:x:10001:10001::/home/delayq:/bin/sh"
    assert with_entry(passwd, user) == passwd + user + "\n"
    assert with_entry(passwd + user + "\n", user) == passwd + user + "\n"
    taken = "other:x:10001:10001::/:/bin/sh\n"
    assert with_entry(taken, user) == taken, "the uid is taken: left as it is"


def test_a_volume_over_the_checkouts_parent_leaves_the_image_reachable(tmp_path: Path) -> None:
    """An emptyDir at /tmp (the rebalance Job has one) with this checkout under
    /tmp, as in a CI clone: the container still finds the venv's scripts and the
    source tree, as a real image keeps its files outside /tmp. A real podinit run
    (a mount namespace, a tmpfs root, chroot)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the local kubelet needs root and unshare (as every k8s test does)")
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "empty").mkdir()
    plan = {
        "rootfs": str(tmp_path / "rootfs"),
        "image": [sys.base_prefix, str(VENV_BIN.parent), str(ROOT)],
        "mounts": [{"source": str(tmp_path / "empty"), "target": str(ROOT.parent)}],
        "readOnlyRootFilesystem": True,
        "argv": ["delayq-spark", "--help"],
        "env": {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": "/"},
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--",
         sys.executable, str(PODINIT), str(tmp_path / "plan.json")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rebalance" in done.stdout


def test_an_http_probes_port_is_a_number_or_a_named_container_port() -> None:
    container = {"ports": [{"name": "http", "containerPort": 8080}]}
    assert probe_port(container, 9090) == 9090
    assert probe_port(container, "9090") == 9090
    assert probe_port(container, "http") == 8080
    assert probe_port(container, "grpc") is None, "no such port: the probe fails"


class _Codes(http.server.BaseHTTPRequestHandler):
    """``/<code>`` answers that status (``/slow`` takes 3 s)."""

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(3)
        code = 200 if self.path == "/slow" else int(self.path.strip("/"))
        self.send_response(code)
        if 300 <= code < 400:
            self.send_header("Location", "http://192.0.2.1/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_an_http_probe_succeeds_from_200_to_399_within_a_second() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Codes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        for code, ok in ((200, True), (204, True), (302, True), (399, True), (404, False),
                         (500, False), (503, False)):  # fmt: skip
            assert http_probe({"path": f"/{code}", "port": port}, {}, "127.0.0.1") is ok, code
        t0 = time.monotonic()
        assert not http_probe({"path": "/slow", "port": port}, {}, "127.0.0.1"), "timed out"
        assert time.monotonic() - t0 < 2.0
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert not http_probe({"path": "/", "port": closed}, {}, "127.0.0.1")


def test_an_https_probe_does_not_verify_the_certificate(tmp_path: Path) -> None:
    """``scheme: HTTPS``: a certificate from a CA the kubelet does not know is
    fine (the kubelet skips verification); the status still decides."""
    certs = Certificates(tmp_path).generate()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Codes)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        https = {"port": port, "scheme": "HTTPS"}
        assert http_probe({**https, "path": "/200"}, {}, "127.0.0.1")
        assert not http_probe({**https, "path": "/503"}, {}, "127.0.0.1")
        assert not http_probe({"port": port, "path": "/200"}, {}, "127.0.0.1"), "plain HTTP"
    finally:
        server.shutdown()
        server.server_close()


# ---- on the real API server ---------------------------------------------------


@pytest.fixture
def ns(kube: Kube, kubelet: LocalKubelet) -> Iterator[str]:
    """A namespace of its own (no operator needed: plain pods)."""
    name = f"kl-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _pod(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A pod for the local node: one container of the image ``delayq:*`` (this
    checkout: ``python`` is the venv's)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            **pod_selector(),
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "delayq:test", **container}],
            **spec,
        },
    }


def _secret(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def _lines(kubelet: LocalKubelet, ns: str, name: str) -> list[dict[str, Any]]:
    """The JSON lines the pod's container printed."""
    out = []
    for log in kubelet.logs(ns, name):
        out += [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return out


def _status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict((kube.get("pod", name, ns) or {}).get("status") or {})


def _ready(kube: Kube, ns: str, name: str) -> bool:
    conditions = _status(kube, ns, name).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


# What a container sees of its mounts, one JSON line whenever it changes.
WATCH = """
import json, os, sys, time
last = None
while True:
    now = {"uid": os.getuid(), "token": os.environ.get("TOKEN")}
    for mount in sys.argv[1:]:
        try:
            files = sorted(f for f in os.listdir(mount) if not f.startswith(".."))
            seen = {"files": files, "readOnly": bool(os.statvfs(mount).f_flag & os.ST_RDONLY)}
            for f in files:
                st = os.stat(os.path.join(mount, f))
                with open(os.path.join(mount, f)) as fh:
                    seen[f] = [fh.read(), oct(st.st_mode & 0o7777), st.st_gid]
        except OSError as e:
            seen = {"error": str(e)}
        now[mount] = seen
    if now != last:
        print(json.dumps(now), flush=True)
        last = now
    time.sleep(0.2)
"""


def test_a_secret_volume_is_read_by_a_non_root_user_and_follows_updates(
    kube: Kube, kubelet: LocalKubelet, ns: str
) -> None:
    """A 0440 key, group-owned by the pod's fsGroup, read by uid 10001; mounted
    read-only though the mount does not ask; an update of the Secret reaches
    the running container (the ``..data`` swap); env from ``secretKeyRef``."""
    kube.apply(_secret("tls", **{"tls.key": "key-1\n", "tls.crt": "crt-1\n", "token": "t0k"}), ns)
    kube.apply(
        _pod(
            "reader",
            {
                "command": ["python", "-c", WATCH, "/etc/tls"],
                "env": [
                    {
                        "name": "TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": "tls", "key": "token"}},
                    }
                ],
                "volumeMounts": [{"name": "tls", "mountPath": "/etc/tls"}],
            },
            securityContext={"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 2000},
            volumes=[
                {
                    "name": "tls",
                    "secret": {
                        "secretName": "tls",
                        "defaultMode": 0o440,
                        "items": [
                            {"key": "tls.crt", "path": "tls.crt"},
                            {"key": "tls.key", "path": "tls.key"},
                        ],
                    },
                }
            ],
        ),
        ns,
    )
    first = kube.wait_for(
        "reader's first view of /etc/tls",
        lambda: next(iter(_lines(kubelet, ns, "reader")), None),
        timeout_s=60,
    )
    assert first["uid"] == 10001 and first["token"] == "t0k", first
    assert first["/etc/tls"] == {
        "files": ["tls.crt", "tls.key"],  # only the items asked for
        "readOnly": True,
        "tls.crt": ["crt-1\n", "0o440", 2000],
        "tls.key": ["key-1\n", "0o440", 2000],
    }, first

    t0 = time.monotonic()
    kube.apply(_secret("tls", **{"tls.key": "key-2\n", "tls.crt": "crt-2\n", "token": "new"}), ns)
    rotated = kube.wait_for(
        "reader sees the rotated key",
        lambda: next(
            (v for v in _lines(kubelet, ns, "reader")
             if v["/etc/tls"].get("tls.key", [""])[0] == "key-2\n"),
            None,
        ),
        timeout_s=30,
    )  # fmt: skip
    print(f"update seen by the container after {time.monotonic() - t0:.1f}s")
    assert rotated["/etc/tls"]["tls.crt"] == ["crt-2\n", "0o440", 2000], rotated
    assert rotated["token"] == "t0k", "env is set once, at the start (as the kubelet)"
    assert all("error" not in v["/etc/tls"] for v in _lines(kubelet, ns, "reader")), (
        "no torn read during the swap"
    )
    assert _status(kube, ns, "reader")["containerStatuses"][0]["restartCount"] == 0


def test_a_pod_waits_for_its_missing_secret_unless_optional(
    kube: Kube, kubelet: LocalKubelet, ns: str
) -> None:
    kube.apply(
        _pod(
            "waiter",
            {
                "command": ["python", "-c", WATCH, "/etc/later", "/etc/maybe"],
                "volumeMounts": [
                    {"name": "later", "mountPath": "/etc/later"},
                    {"name": "maybe", "mountPath": "/etc/maybe"},
                ],
            },
            volumes=[
                {"name": "later", "secret": {"secretName": "later"}},
                {"name": "maybe", "secret": {"secretName": "absent", "optional": True}},
            ],
        ),
        ns,
    )

    def waiting() -> dict[str, Any] | None:
        statuses = _status(kube, ns, "waiter").get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("waiting")

    state = kube.wait_for("waiter's container waiting", waiting, timeout_s=60)
    assert state["reason"] == "ContainerCreating", state
    assert 'secret "later" not found' in state["message"], state
    time.sleep(3)  # it keeps waiting
    rt = kubelet.runtime(ns, "waiter")
    assert rt is not None and rt.containers[0].proc is None, "nothing started"
    status = _status(kube, ns, "waiter")
    assert status["phase"] == "Pending", status
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"

    kube.apply(_secret("later", password="hunter2"), ns)
    seen = kube.wait_for(
        "waiter started once its Secret exists",
        lambda: next(iter(_lines(kubelet, ns, "waiter")), None),
        timeout_s=30,
    )
    assert seen["/etc/later"]["password"] == ["hunter2", "0o644", 0], "defaultMode 0644, root"
    assert seen["/etc/maybe"] == {"files": [], "readOnly": True}, "optional: an empty volume"
    assert _status(kube, ns, "waiter")["phase"] == "Running"


# Serves 200 on every path but /healthz, which answers what /set/<code> last set
# (503 to start with); logs each request on stderr.
SERVE = """
import http.server, os
code = [503]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/set/"):
            code[0] = int(self.path[len("/set/"):])
        status = code[0] if self.path == "/healthz" else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
http.server.ThreadingHTTPServer((os.environ["POD_IP"], 8080), Handler).serve_forever()
"""


def test_an_http_get_probe_makes_the_pod_ready_only_while_its_path_answers_200(
    kube: Kube, kubelet: LocalKubelet, ns: str
) -> None:
    kube.apply(
        _pod(
            "web",
            {
                "command": ["python", "-u", "-c", SERVE],
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                ],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
            },
        ),
        ns,
    )

    def probed_503(n: int) -> bool:
        return "".join(kubelet.logs(ns, "web")).count('"GET /healthz HTTP/1.1" 503') >= n

    kube.wait_for("two probes answered 503", lambda: probed_503(2), timeout_s=60)
    status = _status(kube, ns, "web")
    assert "running" in status["containerStatuses"][0]["state"], status
    assert status["containerStatuses"][0]["ready"] is False
    assert not _ready(kube, ns, "web"), "503: not ready"

    ip = status["podIP"]
    with urllib.request.urlopen(f"http://{ip}:8080/set/200", timeout=5) as r:
        assert r.status == 200
    kube.wait_for("web Ready once /healthz answers 200", lambda: _ready(kube, ns, "web"), 15)
    assert _status(kube, ns, "web")["containerStatuses"][0]["ready"] is True

    with urllib.request.urlopen(f"http://{ip}:8080/set/503", timeout=5) as r:
        assert r.status == 200
    kube.wait_for(
        "web not Ready once /healthz answers 503 again", lambda: not _ready(kube, ns, "web"), 15
    )
