"""pygrpc-native's asyncio server (``NativeServer``) with a server-streaming send
that waits for room on the event loop.

Why: pygrpc-native 0.5 queues one message of a server stream ahead of its HTTP/2
writer; a second send while that one is still queued finds the stream full, and
the library then blocks a thread of the loop's default executor until there is
room, one executor round trip (a thread wake, the GIL taken back, a loop wake-up)
per message. A RocketMQ receive answers 34 messages (status, 32 messages, a
timestamp), so most of them paid that trip: ~8 ms a receive, the burst
deliveries' limit (``bench.compare --systems delayq_rmq5``).

What: a full stream is tried again after each turn of the loop (the writer runs
in a Rust thread without the GIL and usually frees the slot within a turn or
two), ``SPINS`` times; a client that really is behind (HTTP/2 flow control) is
then waited for as the library does, on the executor, so a slow reader costs
no CPU. Everything else is the library's server unchanged.

``_send`` is the library's private method (checked at import: ``supported``);
where it is missing or takes other arguments, the server logs that once and
sends as the library does.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

import pygrpc_native
import pygrpc_native.aio as native
from pygrpc_native import STREAM_CLOSED, STREAM_FULL

__all__ = ["SPINS", "NativeServer", "supported"]

log = logging.getLogger("delayq.server")

SPINS = 64
"""Loop turns a full stream is tried again before the send waits on the executor."""


def supported() -> bool:
    """Whether this pygrpc-native has the send this server replaces."""
    send = getattr(native.Server, "_send", None)
    if send is None or not inspect.iscoroutinefunction(send):
        return False
    return list(inspect.signature(send).parameters) == ["self", "call", "context", "response"]


class NativeServer(native.Server):
    """``pygrpc_native.aio.Server`` whose stream sends wait for room on the loop."""

    async def _send(self, call: Any, context: Any, response: Any) -> bool:
        front = self._front
        assert front is not None  # started
        data = self._encode(call, context, response)
        if data is None:
            return False
        context._initial_sent = True
        for _ in range(SPINS):
            sent = front.stream_try_send(call.call_id, data)
            if sent != STREAM_FULL:
                return bool(sent != STREAM_CLOSED)
            await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        return bool(await loop.run_in_executor(None, front.stream_send, call.call_id, data))


def server(options: list[tuple[str, Any]]) -> native.Server:
    """A server on the native front: ``NativeServer`` where this library has the
    send it replaces, else the library's own (logged once)."""
    if supported():
        return NativeServer(options=options)
    log.warning(
        "pygrpc-native %s has no Server._send(call, context, response): stream "
        "sends wait on the executor when the stream is full",
        pygrpc_native.__version__,
    )
    return native.server(options=options)
