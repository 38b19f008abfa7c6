"""``delayq.AsyncClient``: the asyncio shell over ``client.core`` (grpc.aio)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import grpc

from ..addresses import check_target
from . import core
from .core import Outgoing, Received, RetryPolicy, Scheduled
from .shell import ShellState

__all__ = ["AsyncClient"]

R = TypeVar("R")


class AsyncClient(ShellState):
    def __init__(
        self,
        address: str = "127.0.0.1:7420",
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        check_target(address)  # gRPC would dial a port out of range wrapped
        super().__init__(
            address, timeout_s, retry, grpc.aio.insecure_channel(address), grpc.aio.insecure_channel
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()

    async def refresh_route(self) -> core.RouteTable:
        """Fetch the shard map again (the client does this on first use)."""
        self._routes = core.RouteTable.from_response(await self.route())
        return self._routes

    async def _table(self) -> core.RouteTable:
        return self._routes or await self.refresh_route()

    async def _stub_for(self, shard: int) -> Any:
        return self._cached_stub((await self._table()).masters[shard])

    async def _run(self, call: core.Call[R], shard: int | None = None) -> R:
        stub = self._stub if shard is None else await self._stub_for(shard)
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = await getattr(stub, call.method)(call.request, timeout=call.timeout_s)
                return call.parse(resp)
            except grpc.aio.AioRpcError as exc:
                wait = self.retry.delay_s(
                    attempt, exc.code(), core.retry_after_ms(exc.trailing_metadata())
                )
                if wait is None:
                    raise
                await asyncio.sleep(wait)

    async def schedule(
        self,
        topic: str,
        body: bytes,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
        level: int | None = None,
        key: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> Scheduled:
        m = Outgoing(
            topic=topic, body=body, at=at, delay=delay, level=level, key=key, headers=headers or {}
        )
        return (await self.schedule_many([m]))[0]

    async def schedule_many(self, messages: Sequence[Outgoing]) -> list[Scheduled]:
        return await self._run(core.schedule(messages, self.timeout_s))

    async def cancel(self, *ids: str) -> list[str]:
        return await self._run(core.cancel(ids, self.timeout_s))

    async def reschedule(
        self,
        message_id: str,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
    ) -> Scheduled:
        return await self._run(core.reschedule(message_id, at, delay, self.timeout_s))

    async def lookup(self, message_id: str) -> dict[str, Any]:
        return await self._run(core.lookup(message_id, self.timeout_s))

    async def receive(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = 32,
        wait_s: float = 0.0,
        invisible_s: float = 30.0,
        auto_ack: bool = False,
    ) -> list[Received]:
        """Up to ``max_messages`` due messages for ``group``, long-polling ``wait_s``.
        Ack them by receipt, or pass ``auto_ack`` to have them acked as they are
        handed out (at-most-once: no receipts, never redelivered)."""
        return await self._run(
            core.receive(topic, group, max_messages, wait_s, invisible_s, self.timeout_s, auto_ack)
        )

    async def subscribe(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = 1000,
        wait_s: float = 1.0,
        invisible_s: float = 30.0,
        auto_ack: bool = False,
    ) -> AsyncIterator[list[Received]]:
        """Batches of due messages pushed by the server as they come due; leaving the
        ``async for`` (break, or ``aclose()``) cancels the stream."""
        call = core.subscribe(topic, group, max_messages, wait_s, invisible_s, auto_ack)
        stream = self._stub.Subscribe(call.request)
        try:
            async for resp in stream:
                yield call.parse(resp)
        finally:
            stream.cancel()

    async def ack(self, topic: str, group: str, receipts: Sequence[str]) -> list[str]:
        return await self._run(core.ack(topic, group, receipts, self.timeout_s))

    async def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_s: float
    ) -> list[str]:
        return await self._run(
            core.change_invisibility(topic, group, receipts, invisible_s, self.timeout_s)
        )

    async def stats(self, topic: str = "") -> dict[str, Any]:
        return await self._run(core.stats(topic, self.timeout_s))

    async def route(self, topic: str = "") -> Any:
        return await self._run(core.route(topic, self.timeout_s))
