"""A real Kubernetes control plane as local processes, for the operator's tests.

etcd, kube-apiserver (per-run CA and certificates, RBAC, an admin client
certificate in ``system:masters``), kube-controller-manager, kube-scheduler
and fake nodes (``fakenodes.py``: pods of StatefulSets get scheduled, go
Running and Ready without a kubelet) on free loopback ports. Binaries come
from ``tests/k8s/tools/build.sh`` (``make k8s-tools``); a missing binary is an
error, never a skip. When ``make test`` builds them in the background
(``BUILD_STATUS_ENV``), asking for one waits for that build. Each run's
certificates, data, kubeconfig and logs live in one directory outside the repo
tree.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

BIN_DIR = Path(os.environ.get("DELAYQ_K8S_BIN", Path.home() / ".cache/delayq-k8s/bin"))
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
BUILD_STATUS_ENV = "DELAYQ_K8S_BUILD_STATUS"
"""Set by ``make test`` while it builds the binaries in the background: the path
of a file that holds the build's exit code once it ended (its log beside it)."""
BUILD_WAIT_S = 3600.0
ROOT = Path(__file__).resolve().parents[3]
FAKE_NODES = 3


def wait_for_build() -> None:
    """Return once the background build of ``make test`` (if any) has ended; raise
    if it failed."""
    status = os.environ.get(BUILD_STATUS_ENV)
    if not status:
        return
    path = Path(status)
    deadline = time.monotonic() + BUILD_WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Kubernetes test binaries' build took over {BUILD_WAIT_S}s")
        time.sleep(1)
    code = path.read_text().strip()
    if code != "0":
        log = path.with_suffix(".log")
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
        raise RuntimeError(f"building the Kubernetes test binaries failed ({code}), {log}:\n{tail}")


def require_binary(name: str) -> str:
    wait_for_build()
    path = BIN_DIR / name
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"{path} is missing: build the test control plane with `make k8s-tools` "
            "(tests/k8s/tools/build.sh)"
        )
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )


def _cert(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: tuple[x509.Name, rsa.RSAPrivateKey] | None,
    *,
    ca: bool = False,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, signer = issuer if issuer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class Certificates:
    """Per-run PKI: CA, apiserver serving pair, admin client pair, SA key pair."""

    dir: Path

    def generate(self) -> Certificates:
        self.dir.mkdir(parents=True, exist_ok=True)
        ca_key = _key()
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "delayq-test-ca")])
        ca = _cert(ca_name, ca_key, None, ca=True)
        self.ca.write_bytes(_pem(ca))
        server_key = _key()
        sans: list[x509.GeneralName] = [
            x509.DNSName(n)
            for n in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
        ]
        sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "10.0.0.1")]
        server = _cert(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
            server_key,
            (ca_name, ca_key),
            sans=sans,
        )
        self.server_cert.write_bytes(_pem(server))
        _write_key(server_key, self.server_key)
        admin_key = _key()
        admin = _cert(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.COMMON_NAME, "delayq-test-admin"),
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                ]
            ),
            admin_key,
            (ca_name, ca_key),
        )
        self.admin_cert.write_bytes(_pem(admin))
        _write_key(admin_key, self.admin_key)
        sa_key = _key()
        _write_key(sa_key, self.sa_key)
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return self

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def kubeconfig_text(server: str, ca: Path, *, user: dict[str, str]) -> str:
    """A kubeconfig with one cluster/user/context; ``user`` holds the credential
    fields (``client-certificate``/``client-key`` or ``token``)."""
    lines = [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: test",
        "  cluster:",
        f"    server: {server}",
        f"    certificate-authority: {ca}",
        "users:",
        "- name: test",
        "  user:",
        *(f"    {k}: {v}" for k, v in user.items()),
        "contexts:",
        "- name: test",
        "  context: {cluster: test, user: test, namespace: default}",
        "current-context: test",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class ControlPlane:
    """Start with :meth:`start`, stop with :meth:`stop`; ``kubeconfig`` is admin."""

    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    server: str = ""

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def start(self, timeout_s: float = 120.0) -> ControlPlane:
        for name in BINARIES:
            require_binary(name)
        if self.root.exists():
            shutil.rmtree(self.root)
        self.logs.mkdir(parents=True)
        self.certs = Certificates(self.root / "pki").generate()
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self._spawn(
            "etcd",
            [
                "--data-dir", str(self.root / "etcd"),
                "--listen-client-urls", etcd_url,
                "--advertise-client-urls", etcd_url,
                "--listen-peer-urls", peer_url,
                "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"default={peer_url}",
                "--unsafe-no-fsync",
            ],
        )  # fmt: skip
        self._wait("etcd", lambda: _http_ok(f"{etcd_url}/health"), timeout_s)
        c = self.certs
        self.server = f"https://127.0.0.1:{api_port}"
        self._spawn(
            "kube-apiserver",
            [
                "--etcd-servers", etcd_url,
                "--bind-address", "127.0.0.1",
                "--secure-port", str(api_port),
                "--cert-dir", str(self.root / "apiserver-certs"),
                "--tls-cert-file", str(c.server_cert),
                "--tls-private-key-file", str(c.server_key),
                "--client-ca-file", str(c.ca),
                "--authorization-mode", "Node,RBAC",
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--service-account-key-file", str(c.sa_pub),
                "--service-account-signing-key-file", str(c.sa_key),
                "--service-cluster-ip-range", "10.0.0.0/24",
                "--allow-privileged",
                "--disable-admission-plugins", "ServiceAccount",
            ],
        )  # fmt: skip
        self.kubeconfig.write_text(
            kubeconfig_text(
                self.server,
                c.ca,
                user={"client-certificate": str(c.admin_cert), "client-key": str(c.admin_key)},
            )
        )
        self._wait("kube-apiserver", self._api_ready, timeout_s)
        kube = ["--kubeconfig", str(self.kubeconfig)]
        self._spawn(
            "kube-controller-manager",
            [
                *kube,
                "--leader-elect=false",
                "--bind-address", "127.0.0.1",
                "--secure-port", "0",
                "--service-account-private-key-file", str(c.sa_key),
                "--root-ca-file", str(c.ca),
                "--use-service-account-credentials=false",
            ],
        )  # fmt: skip
        self._spawn(
            "kube-scheduler",
            [*kube, "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "0"],
        )
        self._spawn(
            "fake-nodes",
            [str(self.kubeconfig), str(FAKE_NODES)],
            command=[sys.executable, "-m", "tests.k8s.support.fakenodes"],
        )
        return self

    def _spawn(self, name: str, args: list[str], command: list[str] | None = None) -> None:
        with open(self.logs / f"{name}.log", "wb") as log:  # the child has its own copy
            self.procs[name] = subprocess.Popen(
                [*(command or [require_binary(name)]), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )

    def _api_ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.certs.ca))
        ctx.load_cert_chain(str(self.certs.admin_cert), str(self.certs.admin_key))
        return _http_ok(f"{self.server}/readyz", ctx)

    def _wait(self, name: str, ready: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready after {timeout_s}s:\n{self.tail(name)}")

    def tail(self, name: str, lines: int = 40) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def check_alive(self) -> None:
        """Raise if a component died (its log tail in the message)."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.tail(name)}")

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
            return int(resp.status) == 200
    except OSError:
        return False
