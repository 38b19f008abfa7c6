"""The shard pods' and the Job pods' security contexts: the ``restricted`` Pod
Security Standard (pure: no cluster, no I/O).
"""

from __future__ import annotations

from typing import Any

__all__ = ["RUN_AS", "TMP", "container_security", "pod_security", "tmp_mount"]

# The image's user and group (Dockerfile: uid and gid 10001); fsGroup makes the
# data volume theirs.
RUN_AS = 10001

TMP = "/tmp"
"""Where a container whose root file system is read-only may write: an emptyDir."""


def tmp_mount() -> dict[str, Any]:
    """The mount of the pod's ``tmp`` emptyDir at ``TMP``."""
    return {"name": "tmp", "mountPath": TMP}


def pod_security() -> dict[str, Any]:
    """The pods' securityContext: the image's non-root user, and a data volume
    that user can write (fsGroup; the ownership walk runs only when the volume's
    root does not match, so a large volume does not slow every start)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    """The server container's securityContext: it writes only under /data (and
    /tmp, an emptyDir: the gRPC server's Unix socket)."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
