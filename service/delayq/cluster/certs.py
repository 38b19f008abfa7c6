"""A throwaway CA and certificates for a local cluster (``cluster up --tls``) and for
tests: ECDSA P-256, PEM, made with ``delayq.pki``. Not for production: the
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import pki
from ..pki import Issued
from ..tls import TlsConfig

__all__ = ["Issued", "LocalTls", "control_tls", "issue", "local_tls", "new_ca", "public_tls"]

VALID_DAYS = 30
LOCAL_HOSTS = ("127.0.0.1", "::1", "localhost")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_ca(common: str = "delayq local CA", days: int = VALID_DAYS) -> Issued:
    """A CA valid from now for ``days`` (``delayq.pki.new_ca``)."""
    return pki.new_ca(common, lifetime=datetime.timedelta(days=days), now=_now())


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
    for server use, client use or both, valid from now for ``days``."""
    return pki.issue(
        ca,
        common,
        hosts=hosts,
        server=server,
        client=client,
        lifetime=datetime.timedelta(days=days),
        now=_now(),
    )


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
