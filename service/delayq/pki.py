"""Certificate primitives, pure: ECDSA P-256 keys, a CA, certificates it signs, and
the few questions asked of a certificate (its names, its signer, its lifetime).
Made with ``cryptography``; the time is an argument, never read from a clock, so
the callers' decisions can be tested at any instant.

Two callers share it: the local cluster's throwaway CA (``delayq.cluster.certs``)
and the operator's CA (``delayq_operator.certificates``). ``Issued.write`` is the
one I/O here, for the local cluster and tests.

Invariants: every certificate's ``not_valid_before`` is its issue time less
``SKEW`` (a peer whose clock is a little behind accepts it); a certificate
never outlives the CA that signs it (its ``not_valid_after`` is capped at the
CA's); a CA signs leaves only (``path_length=0``).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "SKEW",
    "Issued",
    "fingerprint",
    "issue",
    "issued_at",
    "key_matches",
    "load_certs",
    "new_ca",
    "pem",
    "san_names",
    "signed_by",
]

SKEW = datetime.timedelta(minutes=5)
"""How far before its issue time a certificate is valid (peers' clocks may lag)."""


@dataclass(frozen=True)
class Issued:
    """A key and its certificate, PEM."""

    key: bytes
    cert: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert)

    def write(self, cert_path: Path, key_path: Path) -> None:
        """The certificate and the key (mode 0600) to files."""
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


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _builder(
    subject: str,
    issuer: x509.Name,
    public: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW)
        .not_valid_after(not_after)
    )


def new_ca(common: str, *, lifetime: datetime.timedelta, now: datetime.datetime) -> Issued:
    """A self-signed CA, valid from ``now`` (less ``SKEW``) for ``lifetime``."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(common, _name(common), key.public_key(), now, now + lifetime)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(_pem_key(key), pem(cert))


def issue(
    ca: Issued,
    common: str,
    *,
    hosts: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    lifetime: datetime.timedelta,
    now: datetime.datetime,
) -> Issued:
    """A certificate signed by ``ca`` for ``hosts`` (IP addresses or DNS names), for
    server use, client use or both, valid for ``lifetime`` from ``now`` or until the
    CA expires, whichever is first."""
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA's key is not an EC key")
    ca_cert = ca.certificate
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    not_after = min(now + lifetime, ca_cert.not_valid_after_utc)
    builder = (
        _builder(common, ca_cert.subject, key.public_key(), now, not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(_pem_key(key), pem(cert))


def load_certs(bundle: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle, in order; ValueError when it holds none."""
    return x509.load_pem_x509_certificates(bundle)


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Whether ``ca``'s key signed ``cert`` (the signature checked, not just the names)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def san_names(cert: x509.Certificate) -> frozenset[str]:
    """The DNS names and IP addresses (as text) the certificate is for."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return frozenset(sans.get_values_for_type(x509.DNSName)) | ips


def key_matches(cert: x509.Certificate, key_pem: bytes) -> bool:
    """Whether ``key_pem`` is the private key of ``cert``."""
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return bool(key.public_key() == cert.public_key())


def issued_at(cert: x509.Certificate) -> datetime.datetime:
    """When ``issue`` or ``new_ca`` made the certificate (its start of validity plus ``SKEW``)."""
    return cert.not_valid_before_utc + SKEW


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the certificate's DER, hex."""
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
