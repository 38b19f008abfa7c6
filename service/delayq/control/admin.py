"""The supervisor's side of the admin service (``delayq.admin.v1.ShardAdmin``), over
gRPC: probes of several nodes at once and one command at a time, each with a
deadline.

One channel a node, kept for the supervisor's life, with a short reconnect
back-off (a restarted node is reached again within half a second) and its own
subchannel pool. Calls do not wait for a connection: a node that cannot be
reached fails the call at once or at the deadline, and counts as not answering.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import grpc

from ..admin.v1 import admin_pb2, admin_pb2_grpc
from .views import Answer

__all__ = [
    "Admin",
    "AdminError",
    "GrpcAdmin",
    "fence_request",
    "follow_request",
    "look",
    "promote_request",
    "status_request",
]

_CHANNEL_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]


class AdminError(Exception):
    """A command that was refused or not answered; ``code`` is the gRPC status
    name (``FAILED_PRECONDITION``, ``DEADLINE_EXCEEDED``, ``UNAVAILABLE``, ...)."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


class Admin(Protocol):
    """What the shard keeper needs of the nodes (a fake in the unit tests)."""

    def statuses(self, requests: Mapping[str, Any], timeout_s: float) -> dict[str, Answer | None]:
        """Send each node (by name) its ``StatusRequest`` at once; its answer, or
        None when it gave none within ``timeout_s``."""

    def command(self, name: str, method: str, request: Any, timeout_s: float) -> Answer:
        """Call ``method`` (``Promote``, ``Follow``, ``Fence``) on node ``name``;
        raises ``AdminError``."""

    def close(self) -> None: ...


def _error(exc: grpc.RpcError) -> AdminError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return AdminError(code.name if code is not None else "UNKNOWN", str(details or ""))


class GrpcAdmin:
    """``Admin`` over gRPC to the nodes at ``addresses`` (name -> host:port)."""

    def __init__(self, addresses: Mapping[str, str]) -> None:
        self._channels = {
            name: grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
            for name, address in addresses.items()
        }
        self._stubs = {
            name: admin_pb2_grpc.ShardAdminStub(ch) for name, ch in self._channels.items()
        }

    def statuses(self, requests: Mapping[str, Any], timeout_s: float) -> dict[str, Answer | None]:
        futures = {
            name: self._stubs[name].Status.future(request, timeout=timeout_s)
            for name, request in requests.items()
        }
        out: dict[str, Answer | None] = {}
        for name, future in futures.items():
            try:
                out[name] = Answer.from_proto(future.result())
            except grpc.RpcError:
                out[name] = None
        return out

    def command(self, name: str, method: str, request: Any, timeout_s: float) -> Answer:
        try:
            reply = getattr(self._stubs[name], method)(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            raise _error(exc) from None
        return Answer.from_proto(reply)

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()


def status_request(epoch: int = 0, lease_ms: int = 0, insync: frozenset[str] = frozenset()) -> Any:
    """A ``StatusRequest``: epoch 0 only looks; the recorded epoch with a lease
    renews a master's lease and tells it the recorded in-sync set."""
    return admin_pb2.StatusRequest(epoch=epoch, lease_ms=lease_ms, insync=sorted(insync))


def promote_request(epoch: int, insync: frozenset[str], lease_ms: int) -> Any:
    return admin_pb2.PromoteRequest(epoch=epoch, insync=sorted(insync), lease_ms=lease_ms)


def follow_request(epoch: int, master: str) -> Any:
    return admin_pb2.FollowRequest(epoch=epoch, master=master)


def fence_request(epoch: int) -> Any:
    return admin_pb2.FenceRequest(epoch=epoch)


def look(address: str, timeout_s: float = 1.0) -> tuple[Answer | None, str]:
    """One look-only ``Status`` of the node at ``address`` (for ``cluster status``:
    it renews nothing): its answer, or None and the gRPC code it failed with
    (``UNIMPLEMENTED`` from a node without the admin service)."""
    with grpc.insecure_channel(address, options=_CHANNEL_OPTIONS) as channel:
        try:
            reply = admin_pb2_grpc.ShardAdminStub(channel).Status(
                status_request(), timeout=timeout_s
            )
        except grpc.RpcError as exc:
            return None, _error(exc).code
    return Answer.from_proto(reply), ""
