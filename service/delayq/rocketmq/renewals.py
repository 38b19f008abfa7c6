"""Receipts of auto-renewed receives (``Renewals``, pure): a PushConsumer receives
without an invisible duration, so the server picks one and keeps its messages
invisible while the client works on them.

A receive that names no invisible duration (``auto_renew``) hides its messages
for ``RENEWED_INVISIBLE_MS`` and holds their receipts here under the client's
id; every ``RENEW_EVERY_MS`` the servicer extends what is due again, as long as
the client's session lives (its Telemetry stream is open) and for at most
``RENEW_CAP_MS`` from the receive. An ack or an invisibility change settles a
receipt (it is dropped); a client that ends its session leaves its messages to
come back when their last renewal runs out. Not thread-safe: the event loop
owns it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["RENEWED_INVISIBLE_MS", "RENEW_CAP_MS", "RENEW_EVERY_MS", "Renewal", "Renewals"]

RENEWED_INVISIBLE_MS = 60_000
"""How long an auto-renewed receive hides its messages at a time."""
RENEW_EVERY_MS = 20_000
"""How often held receipts are renewed (well within ``RENEWED_INVISIBLE_MS``)."""
RENEW_CAP_MS = 3 * 3_600_000
"""The longest a message is kept invisible by renewals (a client stuck on it)."""


@dataclass(frozen=True, slots=True)
class Renewal:
    """Receipts of one topic and group to renew now."""

    topic: str
    group: str
    receipts: list[str]


@dataclass(slots=True)
class _Held:
    client: str
    topic: str
    group: str
    since_ms: int


class Renewals:
    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}  # receipt -> what it is

    def hold(
        self, client: str, topic: str, group: str, receipts: Sequence[str], now_ms: int
    ) -> None:
        for r in receipts:
            self._held[r] = _Held(client, topic, group, now_ms)

    def settle(self, receipts: Iterable[str]) -> None:
        """Acked, or their invisibility changed by the client: no longer renewed."""
        for r in receipts:
            self._held.pop(r, None)

    def due(self, now_ms: int, live: set[str]) -> list[Renewal]:
        """What to renew now, by topic and group; receipts of clients not in ``live``
        or held for longer than ``RENEW_CAP_MS`` are dropped."""
        out: dict[tuple[str, str], list[str]] = {}
        for r, h in list(self._held.items()):
            if h.client not in live or now_ms - h.since_ms >= RENEW_CAP_MS:
                del self._held[r]
                continue
            out.setdefault((h.topic, h.group), []).append(r)
        return [Renewal(t, g, rs) for (t, g), rs in sorted(out.items())]

    def __len__(self) -> int:
        return len(self._held)
