"""TLS of the server's two ports (reads the certificate files): credentials whose
files are read again when they change, so a certificate is rotated without a
restart.

The settings and what each port asks of a caller:

* ``--tls-cert`` / ``--tls-key``: the node's certificate (chain) and key, served
  on the public and the admin port. The node also presents them as its client
  certificate when it calls another node (a replica's stream from its master's
  admin port, a schedule forwarded to another shard), verifying that node with
  the admin client CA: node certificates are signed by the control plane's CA.
* ``--tls-client-ca``: the public port requires a client certificate signed by
  this CA (mutual TLS); without it any client may connect, over TLS.
* ``--admin-client-ca`` (default: ``--tls-client-ca``): the admin port requires
  a client certificate signed by this CA, the control plane's (the supervisor's
  or the operator's, and the nodes' own). With TLS on and neither CA given the
  server refuses to start: the admin service is never open to any TLS client.
  An ordinary client's certificate from another CA is refused at the handshake.

Rotation: gRPC asks ``Reloader`` on every new connection; it looks at the files'
stat (mtime, size, inode: a Kubernetes Secret is swapped by a symlink) and, when
one changed, reads them again and hands gRPC the new configuration; open
connections keep theirs. A set that cannot be read or whose key does not match
its certificate (a rotation half-written) keeps the previous configuration,
logged once per change, and is tried again on the next connection.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

__all__ = ["CertFiles", "Reloader", "server_credentials"]

log = logging.getLogger("delayq.server")


@dataclass(frozen=True, kw_only=True)
class CertFiles:
    """A port's certificate, key and the CA its callers' certificates must chain to
    (None: no client certificate asked for)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    @property
    def paths(self) -> tuple[Path, ...]:
        return (self.cert, self.key) + ((self.client_ca,) if self.client_ca else ())


def _stamp(paths: tuple[Path, ...]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for p in paths:
        st = os.stat(p)  # follows symlinks: a swapped Secret is a new inode
        out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def _load(files: CertFiles) -> grpc.ServerCertificateConfiguration:
    """The configuration of the files as they are; raises OSError or ValueError (a
    key that is not the certificate's, PEM that does not parse)."""
    cert, key = files.cert.read_bytes(), files.key.read_bytes()
    public = x509.load_pem_x509_certificate(cert).public_key()
    private = serialization.load_pem_private_key(key, password=None)
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if private.public_key().public_bytes(*der) != public.public_bytes(*der):
        raise ValueError(f"the key {files.key} is not the one of the certificate {files.cert}")
    ca = files.client_ca.read_bytes() if files.client_ca else None
    if ca is not None:
        x509.load_pem_x509_certificates(ca)  # a CA file that does not parse: keep the old
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)


class Reloader:
    """The certificate-configuration fetcher of one port (thread-safe: gRPC calls it
    from its own threads)."""

    def __init__(self, files: CertFiles, what: str) -> None:
        self.files = files
        self.what = what
        self.reloads = 0
        self._lock = threading.Lock()  # one reload at a time; the stamp with its config
        self._stamp = _stamp(files.paths)
        self.initial = _load(files)  # raises: a server that cannot serve TLS does not start
        self._failed: tuple[tuple[int, int, int], ...] | None = None

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration when the files changed since the last one, else None."""
        with self._lock:
            try:
                stamp = _stamp(self.files.paths)
            except OSError:
                return None  # a file missing for a moment: what was loaded stays
            if stamp == self._stamp:
                return None
            try:
                config = _load(self.files)
            except Exception as exc:  # whatever the files hold: serve on with the old
                if stamp != self._failed:
                    log.warning("%s TLS: keeping the certificate in use: %s", self.what, exc)
                    self._failed = stamp
                return None
            self._stamp, self._failed = stamp, None
            self.reloads += 1
        log.info("%s TLS: certificate files reloaded", self.what)
        return config


def server_credentials(files: CertFiles, what: str) -> grpc.ServerCredentials:
    """Credentials that follow the files; client certificates are required exactly
    when ``files.client_ca`` is given. Raises OSError or ValueError naming the file."""
    reloader = Reloader(files, what)
    return grpc.dynamic_ssl_server_credentials(
        reloader.initial, reloader, require_client_authentication=files.client_ca is not None
    )
