"""Python clients of a delayq server: ``Client`` (blocking), ``AsyncClient``
(asyncio) and ``Producer`` (auto-batching), all over ``core``."""

from ..shardmap import jump_hash
from ..tls import TlsConfig
from .aio import AsyncClient
from .core import Outgoing, Received, RetryPolicy, Scheduled
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
    "TlsConfig",
    "jump_hash",
]
