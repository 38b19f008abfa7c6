"""kopf's read-only body views as plain JSON-like values (pure), for the handlers
that hand a resource to pure code (``handlers``, ``schedulehandlers``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["as_plain"]


def as_plain(value: Any) -> Any:
    """``value`` (kopf's ``Body``, its mappings and lists) as dicts and lists."""
    if isinstance(value, Mapping):
        return {k: as_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_plain(v) for v in value]
    return value
