"""A throwaway CA and certificates for a local cluster (``cluster up --tls``) and for
tests: ECDSA P-256, PEM, made with ``cryptography``. Not for production: the
CA's key lies beside the certificates, unencrypted.

``local_tls(DIR)`` makes, once, ``DIR/tls/``::

    ca.crt                 the CA; clients verify the nodes with it (--tls-ca)
    node.crt, node.key     every node's certificate: server and client use, for
                           127.0.0.1, ::1 and localhost (the nodes present it to
                           each other's admin ports: it is the control plane's CA)
    control.crt, .key      the supervisor's client certificate for the admin ports
    ca.key                 the CA's key (to issue more, by hand)

and leaves files already there as they are (a cluster started again keeps its CA).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..tls import TlsConfig

__all__ = ["Issued", "LocalTls", "control_tls", "issue", "local_tls", "new_ca", "public_tls"]

VALID_DAYS = 30
LOCAL_HOSTS = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class Issued:
    """A key and its certificate, PEM."""

    key: bytes
    cert: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.write_bytes(self.cert)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.key)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _builder(
    subject: str, issuer: x509.Name, public: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # a little clock skew
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def new_ca(common: str = "delayq local CA", days: int = VALID_DAYS) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(common, _name(common), key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Issued(_pem_key(key), cert.public_bytes(serialization.Encoding.PEM))


def issue(
    ca: Issued,
    common: str,
    *,
    hosts: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    days: int = VALID_DAYS,
) -> Issued:
    """A certificate signed by ``ca`` for ``hosts`` (IP addresses or DNS names),
    for server use, client use or both."""
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    builder = (
        _builder(common, ca_cert.subject, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(_pem_key(key), cert.public_bytes(serialization.Encoding.PEM))


@dataclass(frozen=True)
class LocalTls:
    """The files of ``local_tls``."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def node_cert(self) -> Path:
        return self.dir / "node.crt"

    @property
    def node_key(self) -> Path:
        return self.dir / "node.key"

    @property
    def control_cert(self) -> Path:
        return self.dir / "control.crt"

    @property
    def control_key(self) -> Path:
        return self.dir / "control.key"


def local_tls(dir: Path) -> LocalTls:
    """``dir/tls/``'s CA and certificates, made when missing (module notes)."""
    files = LocalTls(dir / "tls")
    if all(p.exists() for p in (files.ca, files.node_cert, files.control_cert)):
        return files
    files.dir.mkdir(parents=True, exist_ok=True)
    ca = new_ca()
    ca.write(files.ca, files.dir / "ca.key")
    issue(ca, "delayq node", hosts=LOCAL_HOSTS, server=True, client=True).write(
        files.node_cert, files.node_key
    )
    issue(ca, "delayq control plane", client=True).write(files.control_cert, files.control_key)
    return files


def control_tls(files: LocalTls | None) -> TlsConfig | None:
    """How the supervisor calls the admin ports: the CA and its client certificate."""
    if files is None:
        return None
    return TlsConfig(ca=files.ca, cert=files.control_cert, key=files.control_key)


def public_tls(files: LocalTls | None) -> TlsConfig | None:
    """How the supervisor calls the public ports (no client certificate asked)."""
    return None if files is None else TlsConfig(ca=files.ca)
