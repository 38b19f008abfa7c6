"""Python clients of a delayq server: ``Client`` (blocking), ``AsyncClient``
(asyncio) and ``Producer`` (auto-batching), all over ``core``."""

from .aio import AsyncClient
from .core import Outgoing, Received, RetryPolicy, Scheduled, jump_hash
from .sync import Client, Producer, Subscription

__all__ = [
    "AsyncClient",
    "Client",
    "Outgoing",
    "Producer",
    "Received",
    "RetryPolicy",
    "Scheduled",
    "Subscription",
    "jump_hash",
]
