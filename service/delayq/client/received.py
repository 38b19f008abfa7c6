"""A Receive answer in the packed form as a light batch view (``ReceivedBatch``):
a sequence of ``Received`` whose items are made only when read, over the
columns the server sent; ``receipts`` and ``ids`` are columns of their own
(``Texts``, decoded once from their blob), and an ``ack`` of a whole batch's
``receipts`` sends that blob back as it came (no packing again). ``received``
reads a Receive answer of either form.

Invariant: a ``ReceivedBatch`` reads as the list of ``Received`` the message
form gives (equality, iteration, indexing, slicing); the items are made once, on
the first whole read (one ``Received`` each on an index before that); a
malformed packed answer raises ``ServerError`` when read, not later.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple, overload

from ..errors import InvalidArgument
from ..packed import read_received
from .errors import ServerError

__all__ = ["Received", "ReceivedBatch", "Texts", "received"]


class Received(NamedTuple):
    id: str
    topic: str
    key: str
    headers: dict[str, str]
    body: bytes
    deliver_at_ms: int
    delivered_at_ms: int
    receipt: str
    attempt: int


def received(resp: Any) -> Sequence[Received]:
    """The messages of one ReceiveResponse (a Receive reply or a Subscribe batch),
    in whichever form the server sent them."""
    if resp.HasField("packed"):
        return ReceivedBatch(resp.packed)
    return [
        Received(
            m.id,
            m.topic,
            m.key,
            dict(h) if (h := m.headers) else {},  # most have none: skip copying the map
            m.body,
            m.deliver_at_ms,
            m.delivered_at_ms,
            m.receipt,
            m.attempt,
        )
        for m in resp.messages
    ]


class Texts(Sequence[str]):
    """A column of strings, with the ``Blobs`` message it came in (``blob``)."""

    __slots__ = ("_items", "blob")

    def __init__(self, items: list[str], blob: Any = None) -> None:
        self._items = items
        self.blob = blob
        """The ``Blobs`` these came in (None: made by the caller)."""

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self._items == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Texts({self._items!r})"


class ReceivedBatch(Sequence[Received]):
    """The messages of one packed Receive answer (a ``PackedReceived``)."""

    __slots__ = (
        "_attempts",
        "_bodies",
        "_delivered",
        "_due",
        "_headers",
        "_items",
        "_keys",
        "_topic",
        "ids",
        "receipts",
    )

    def __init__(self, packed: Any) -> None:
        try:
            c = read_received(packed)
        except InvalidArgument as exc:
            raise ServerError(f"the server's packed receive answer: {exc}") from None
        self._topic = c.topic
        self.ids = Texts(c.ids, packed.ids)
        self._bodies = c.bodies
        self._keys = c.keys
        self._headers = c.headers
        self._due = c.deliver_at_ms
        self._delivered = c.delivered_at_ms
        self.receipts = Texts(
            c.receipts if c.receipts is not None else [""] * len(c.ids),
            packed.receipts if c.receipts is not None else None,
        )
        """The receipts, in message order ("" each when auto-acked): pass them to
        ``ack`` as they are."""
        self._attempts = c.attempts
        self._items: list[Received] | None = None  # made on the first whole read

    def _all(self) -> list[Received]:
        if self._items is None:
            # tuple.__new__ straight from C: a NamedTuple's _make is Python code
            self._items = list(map(tuple.__new__, repeat(Received), self._rows()))
        return self._items

    def _rows(self) -> Iterator[tuple[Any, ...]]:
        n = len(self._due)
        headers: Sequence[Mapping[str, str]] | Iterator[dict[str, str]] = (
            repeat({}, n) if self._headers is None else [dict(h) for h in self._headers]
        )
        return zip(
            self.ids,
            repeat(self._topic, n),
            repeat("", n) if self._keys is None else self._keys,
            headers,
            self._bodies,
            self._due,
            self._delivered,
            self.receipts,
            self._attempts,
            strict=True,
        )

    def __iter__(self) -> Iterator[Received]:
        return iter(self._all())

    @overload
    def __getitem__(self, i: int) -> Received: ...
    @overload
    def __getitem__(self, i: slice) -> list[Received]: ...
    def __getitem__(self, i: int | slice) -> Received | list[Received]:
        if isinstance(i, slice) or self._items is not None:
            return self._all()[i]
        n = len(self._due)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("ReceivedBatch index out of range")
        return Received(
            self.ids[i],
            self._topic,
            "" if self._keys is None else self._keys[i],
            {} if self._headers is None else dict(self._headers[i]),
            self._bodies[i],
            self._due[i],
            self._delivered[i],
            self.receipts[i],
            self._attempts[i],
        )

    def __len__(self) -> int:
        return len(self._due)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self._all() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ReceivedBatch({self._all()!r})"
