"""TLS of a gRPC caller (reads its files when a channel is made, no other I/O): the
root to verify servers with and, for mutual TLS, the caller's own certificate.

One shape for every caller: the Python clients and the CLI (``--tls-ca``,
``--tls-cert``, ``--tls-key``, or ``DELAYQ_TLS_CA`` / ``DELAYQ_TLS_CERT`` /
``DELAYQ_TLS_KEY``; ``DELAYQ_TLS_PUBLIC=false``: those are for admin ports only,
public ports speak plaintext), a node calling another node (its replication stream, a
forwarded schedule), and the control planes calling the admin service. The
files are read each time credentials are made (``credentials``), so a channel
dialled after a rotation uses the new certificate; an open channel keeps the one
it made its connections with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

__all__ = ["ENV_CA", "ENV_CERT", "ENV_KEY", "ENV_PUBLIC", "TlsConfig", "dial", "dial_aio"]

ENV_CA, ENV_CERT, ENV_KEY = "DELAYQ_TLS_CA", "DELAYQ_TLS_CERT", "DELAYQ_TLS_KEY"
ENV_PUBLIC = "DELAYQ_TLS_PUBLIC"
"""``false``: the servers' public ports speak plaintext, the TLS settings are for
their admin ports (a DelayTopic with the operator's certificates and no
``spec.publicTls``)."""


@dataclass(frozen=True, kw_only=True)
class TlsConfig:
    """A caller's TLS settings (PEM files)."""

    ca: Path | None = None
    """The CA to verify servers' certificates with; None: the system's roots."""
    cert: Path | None = None
    """This caller's certificate (chain), for servers that ask for one (mutual TLS)."""
    key: Path | None = None
    """Its private key; given exactly when ``cert`` is."""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("tls: give the client certificate and its key together")

    @classmethod
    def of(
        cls, ca: str | Path | None, cert: str | Path | None, key: str | Path | None
    ) -> TlsConfig | None:
        """From options that may be unset (None or ""): None when all are."""
        paths = [Path(p) if p else None for p in (ca, cert, key)]
        if not any(paths):
            return None
        return cls(ca=paths[0], cert=paths[1], key=paths[2])

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, public: bool = False) -> TlsConfig | None:
        """From ``DELAYQ_TLS_CA``, ``DELAYQ_TLS_CERT`` and ``DELAYQ_TLS_KEY``; for a
        ``public`` port None when ``DELAYQ_TLS_PUBLIC`` is ``false``."""
        if public and env.get(ENV_PUBLIC, "").lower() in ("false", "0", "off"):
            return None
        return cls.of(env.get(ENV_CA), env.get(ENV_CERT), env.get(ENV_KEY))

    def credentials(self) -> grpc.ChannelCredentials:
        """Channel credentials from the files as they are now; raises OSError."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes() if self.ca else None,
            private_key=self.key.read_bytes() if self.key else None,
            certificate_chain=self.cert.read_bytes() if self.cert else None,
        )


def dial(
    address: str, tls: TlsConfig | None, options: Any = None, *, server_name: str = ""
) -> grpc.Channel:
    """A blocking channel to ``address``: plaintext without ``tls``. ``server_name``:
    the name to verify the server's certificate for, when ``address`` is not it (a
    pod dialled at its IP by a control plane that cannot resolve its DNS name)."""
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    if server_name:
        options = [*(options or []), ("grpc.ssl_target_name_override", server_name)]
    return grpc.secure_channel(address, tls.credentials(), options=options)


def dial_aio(address: str, tls: TlsConfig | None, options: Any = None) -> grpc.aio.Channel:
    """An asyncio channel to ``address``: plaintext without ``tls``."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, tls.credentials(), options=options)
