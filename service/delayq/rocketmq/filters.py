"""Tag filter expressions of a RocketMQ subscription (pure).

A TAG expression is ``*`` (or empty: every message) or tags joined by ``||``
(``a || b``); a message matches when its tag is one of them. SQL92 expressions
are refused (``filter_expression``): delayq does not evaluate them. Messages a
group's filter does not match are acknowledged for that group as they are
received, as a RocketMQ broker skips them.
"""

from __future__ import annotations

from ..errors import InvalidArgument

__all__ = ["TagFilter"]

_FIELD = "filter_expression"


class TagFilter:
    __slots__ = ("tags",)

    def __init__(self, tags: frozenset[str] | None) -> None:
        self.tags = tags  # None: every message

    @classmethod
    def parse(cls, kind: str, expression: str) -> TagFilter:
        """``kind``: "TAG" (or unspecified) or "SQL"."""
        if kind == "SQL":
            raise InvalidArgument(_FIELD, "SQL92 filters are not supported; use a TAG expression")
        text = expression.strip()
        if text in ("", "*"):
            return cls(None)
        tags = frozenset(t.strip() for t in text.split("||"))
        if "" in tags or "*" in tags:
            raise InvalidArgument(_FIELD, f"{expression!r}: use '*' or tags joined by '||'")
        return cls(tags)

    def matches(self, tag: str) -> bool:
        return self.tags is None or tag in self.tags
