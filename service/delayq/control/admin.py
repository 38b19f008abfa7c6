"""The supervisor's side of the admin service (``delayq.admin.v1.ShardAdmin``), over
gRPC: probes of several nodes at once and one command at a time, each with a
deadline.

One channel a node, kept while its address stays (``set_address`` replaces it:
a recreated pod has a new IP), with a short reconnect back-off (a restarted
node is reached again within half a second) and its own subchannel pool. Calls
do not wait for a connection: a node that cannot be reached, or has no address
yet, fails the call at once or at the deadline, and counts as not answering.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import grpc

from ..admin.v1 import admin_pb2, admin_pb2_grpc
from ..tls import TlsConfig, dial
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
    """``Admin`` over gRPC to the nodes at ``addresses`` (name -> the host:port of
    their admin service), over TLS with ``tls`` (the control plane's client
    certificate)."""

    def __init__(self, addresses: Mapping[str, str | None], tls: TlsConfig | None = None) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[str, str, grpc.Channel]] = {}
        self._stubs: dict[str, Any] = {}
        for name, address in addresses.items():
            self.set_address(name, address)

    def _dial(self, name: str, address: str, server_name: str) -> None:
        channel = dial(address, self._tls, _CHANNEL_OPTIONS, server_name=server_name)
        self._channels[name] = (address, server_name, channel)
        self._stubs[name] = admin_pb2_grpc.ShardAdminStub(channel)

    def set_address(self, name: str, address: str | None, server_name: str = "") -> None:
        """Dial node ``name`` at ``address`` from now on (None: it has none); with TLS,
        verify its certificate for ``server_name`` when given (else the address's)."""
        with self._lock:
            old = self._channels.get(name)
            if old is not None and old[:2] == (address, server_name):
                return
            if address is None:
                self._channels.pop(name, None)
                self._stubs.pop(name, None)
            else:
                self._dial(name, address, server_name)
        if old is not None:
            old[2].close()  # a call in flight on it fails: no answer

    def set_tls(self, tls: TlsConfig | None) -> None:
        """Dial every node afresh with ``tls`` (a renewed certificate or trust
        bundle: a channel keeps the credentials it was made with)."""
        with self._lock:
            if tls == self._tls:
                return
            self._tls = tls
            old = list(self._channels.values())
            for name, (address, server_name, _) in list(self._channels.items()):
                self._dial(name, address, server_name)
        for _, _, channel in old:
            channel.close()

    def _stub(self, name: str) -> Any:
        with self._lock:
            return self._stubs.get(name)

    def statuses(self, requests: Mapping[str, Any], timeout_s: float) -> dict[str, Answer | None]:
        futures = {}
        out: dict[str, Answer | None] = {}
        for name, request in requests.items():
            stub = self._stub(name)
            out[name] = None
            if stub is not None:
                with contextlib.suppress(ValueError):  # (its channel was just closed)
                    futures[name] = stub.Status.future(request, timeout=timeout_s)
        for name, future in futures.items():
            with contextlib.suppress(grpc.RpcError):
                out[name] = Answer.from_proto(future.result())
        return out

    def command(self, name: str, method: str, request: Any, timeout_s: float) -> Answer:
        stub = self._stub(name)
        if stub is None:
            raise AdminError("UNAVAILABLE", f"{name} has no address yet")
        try:
            reply = getattr(stub, method)(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            raise _error(exc) from None
        except ValueError as exc:  # its channel was closed meanwhile (a new address)
            raise AdminError("UNAVAILABLE", str(exc)) from None
        return Answer.from_proto(reply)

    def close(self) -> None:
        with self._lock:
            channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for _, _, ch in channels:
            ch.close()


def status_request(
    epoch: int = 0, lease_ms: int = 0, insync: frozenset[str] = frozenset(), token: int = 0
) -> Any:
    """A ``StatusRequest``: epoch 0 only looks; the recorded epoch with a lease
    renews a master's lease from the answer ``token`` names (``views``) and tells
    it the recorded in-sync set."""
    return admin_pb2.StatusRequest(
        epoch=epoch, lease_ms=lease_ms, insync=sorted(insync), lease_token=token
    )


def promote_request(epoch: int, insync: frozenset[str], lease_ms: int, token: int = 0) -> Any:
    return admin_pb2.PromoteRequest(
        epoch=epoch, insync=sorted(insync), lease_ms=lease_ms, lease_token=token
    )


def follow_request(epoch: int, master: str) -> Any:
    return admin_pb2.FollowRequest(epoch=epoch, master=master)


def fence_request(epoch: int) -> Any:
    return admin_pb2.FenceRequest(epoch=epoch)


def look(
    address: str, timeout_s: float = 1.0, tls: TlsConfig | None = None
) -> tuple[Answer | None, str]:
    """One look-only ``Status`` of the node at ``address`` (for ``cluster status``:
    it renews nothing): its answer, or None and the gRPC code it failed with
    (``UNIMPLEMENTED`` from a node without the admin service)."""
    with dial(address, tls, _CHANNEL_OPTIONS) as channel:
        try:
            reply = admin_pb2_grpc.ShardAdminStub(channel).Status(
                status_request(), timeout=timeout_s
            )
        except grpc.RpcError as exc:
            return None, _error(exc).code
    return Answer.from_proto(reply), ""
