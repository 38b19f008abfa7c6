"""Whether the ports a cluster needs are free on the loopback host.

A port counts as free when a listening socket could bind it the way the server
binds (``SO_REUSEADDR``: a port left in TIME_WAIT by a stopped node is free, one
that any process listens on or holds bound is not). The check is a snapshot: a
port taken between it and a node's start shows as that node failing to start
(its log says why) and being retried.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

from .errors import ClusterError

__all__ = ["check_free", "is_free"]


def is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def check_free(host: str, ports: Iterable[tuple[int, str]]) -> None:
    """Raise ``ClusterError`` naming the first port in use and what it was for."""
    for port, what in ports:
        if not is_free(host, port):
            raise ClusterError(
                f"port {port} on {host} ({what}) is in use: "
                "stop what holds it or choose another --base-port"
            )
