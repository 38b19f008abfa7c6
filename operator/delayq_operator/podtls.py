"""How a topic's TLS Secret reaches its pods and jobs: the server's TLS flags,
the Secret as a volume and its mount, a job's client TLS environment (pure: no
cluster, no I/O). The operator's Secret and a user's are mounted alike.
"""

from __future__ import annotations

from typing import Any

from delayq.tls import ENV_CA, ENV_CERT, ENV_KEY, ENV_PUBLIC

from .spec import TlsSpec

__all__ = ["TLS_DIR", "TLS_FILES", "tls_args", "tls_env", "tls_mounts", "tls_volumes"]

TLS_DIR = "/etc/delayq-tls"
"""Where the pods mount their TLS Secret, the operator's ``<topic>-shard-tls`` or
``spec.tls.secretName`` (``tls.crt``, ``tls.key``, ``ca.crt``: the shape
cert-manager writes)."""
TLS_FILES = {"cert": f"{TLS_DIR}/tls.crt", "key": f"{TLS_DIR}/tls.key", "ca": f"{TLS_DIR}/ca.crt"}


def tls_args(tls: TlsSpec) -> list[str]:
    """The server's TLS options: its certificate on the admin port, and on the
    public ones when ``public``; the admin port (and with ``requireClientCert`` the
    public one) takes client certificates of the Secret's CA, which signs the
    pods', the operator's and the jobs' certificates."""
    if not tls.enabled:
        return []
    out = ["--tls-cert", TLS_FILES["cert"], "--tls-key", TLS_FILES["key"]]
    out += ["--admin-client-ca", TLS_FILES["ca"]]
    if tls.require_client_cert:
        out += ["--tls-client-ca", TLS_FILES["ca"]]
    if not tls.public:
        out += ["--public-tls", "false"]
    return out


def tls_volumes(tls: TlsSpec, topic: str) -> list[dict[str, Any]]:
    """The Secret as a volume (its key readable by the pod's group only): the
    operator's or the user's, mounted alike."""
    if not tls.enabled:
        return []
    return [{"name": "tls", "secret": {"secretName": tls.secret(topic), "defaultMode": 0o440}}]


def tls_mounts(tls: TlsSpec) -> list[dict[str, Any]]:
    """Where the Secret is mounted (a directory: the kubelet swaps its files in place
    on a renewal, and the server picks the new certificate up without a restart)."""
    return [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}] if tls.enabled else []


def tls_env(tls: TlsSpec) -> list[dict[str, str]]:
    """A job's client TLS (``DELAYQ_TLS_*``): it presents the pods' certificate (a
    client one too), on the public ports only when they serve TLS."""
    if not tls.enabled:
        return []
    return [
        {"name": ENV_CA, "value": TLS_FILES["ca"]},
        {"name": ENV_CERT, "value": TLS_FILES["cert"]},
        {"name": ENV_KEY, "value": TLS_FILES["key"]},
        {"name": ENV_PUBLIC, "value": "true" if tls.public else "false"},
    ]
