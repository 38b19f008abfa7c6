"""State shared by the sync and async client shells: address, deadline, retry
policy, the bootstrap channel and the per-master stub cache for routing. The
caller passes the channel (blocking or asyncio), so this module does no I/O."""

from __future__ import annotations

from typing import Any

from ..v1 import delayq_pb2_grpc as pb_grpc
from . import core
from .core import RetryPolicy

__all__ = ["ShellState"]


class ShellState:
    def __init__(
        self,
        address: str,
        timeout_s: float,
        retry: RetryPolicy | None,
        channel: Any,
        channel_factory: Any,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._channel = channel
        self._new_channel = channel_factory
        self._stub = pb_grpc.DelayQueueStub(channel)
        self._routes: core.RouteTable | None = None
        self._shard_stubs: dict[str, Any] = {address: self._stub}
        self._channels = [channel]
        self._spread = 0

    def _cached_stub(self, address: str) -> Any:
        """The stub for a shard master, opening its channel on first use."""
        stub = self._shard_stubs.get(address)
        if stub is None:
            channel = self._new_channel(address)
            self._channels.append(channel)
            stub = self._shard_stubs[address] = pb_grpc.DelayQueueStub(channel)
        return stub
