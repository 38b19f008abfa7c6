"""A validated batch of messages as the accept stage takes it (``Columns``), and
one validated message (``Prepared``); the rules that make them are the engine's
(``engine.validation``), which hands its checker to the by-id calls and imports
as a ``Prepare``.

Invariant: everything in a ``Columns`` or a ``Prepared`` has passed those rules
(the timer pipeline never judges client input).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

from ..formats.headers import encode_headers
from ..formats.keyheaders import holds_of
from ..recurrence import SCHEDULE_HEADER, SCHEDULE_TIME_HEADER
from ..types import ScheduleRequest

__all__ = ["Columns", "Prepare", "Prepared", "prepare_copy"]


class Prepared(NamedTuple):
    """A validated schedule request, encoded for the CommitLog."""

    topic: str
    deliver_at_ms: int
    key: bytes
    headers: bytes
    body: bytes
    if_exists: int = 0  # ``types.IfExists``
    dedup_id: bytes = b""


_FIRING_HEADERS = (SCHEDULE_HEADER, SCHEDULE_TIME_HEADER)
_STAND_IN = ScheduleRequest(topic="copy", body=b"copy")
"""What a copy is checked as in place of what it keeps of its record (any client
topic, any body)."""


def prepare_copy(
    prepare: Prepare, req: ScheduleRequest, dedup: bytes, now_ms: int, prefix: str = ""
) -> Prepared:
    """A copy of a stored message (a reschedule, a rebalance's import), ``req``,
    checked by ``prepare`` as a new schedule for what it takes anew (its due time,
    its headers) but not for what it keeps of its record as it is, unchecked
    (stored under earlier rules, or written by delayq itself, as a new schedule
    may not be): its key, topic and body (a recurring schedule's plan is a
    message of the reserved topic ``_schedules``; a firing's body may be empty),
    and delayq's own headers: the reserved dedup headers of its original
    (``formats.keyheaders.split_dedup``) and a firing's schedule headers
    (``recurrence.SCHEDULE_HEADER``, ``SCHEDULE_TIME_HEADER``), carried on as
    they were; and its dedup id, so the copy is filed under it too."""
    headers = dict(req.headers)
    firing = {name: headers.pop(name) for name in _FIRING_HEADERS if name in headers}
    checked = dataclasses.replace(
        req, topic=_STAND_IN.topic, key="", body=_STAND_IN.body, headers=headers
    )
    item = prepare(checked, now_ms, prefix)
    own = (encode_headers(firing) if firing else b"") + dedup
    item = item._replace(
        topic=req.topic, key=req.key.encode(), headers=item.headers + own, body=req.body
    )
    if not dedup:
        return item
    return item._replace(dedup_id=holds_of([dedup], 1)[1][0])


class Prepare(Protocol):
    """Validate one request (``engine.validation.prepare`` with the shard's
    settings); ``prefix`` goes before the field names of its errors."""

    def __call__(self, req: ScheduleRequest, now_ms: int, prefix: str = "") -> Prepared: ...


class Columns(NamedTuple):
    """Validated messages of a batch, as columns ready to encode. ``keys`` and
    ``headers`` are None when all are empty; ``origin`` maps each row back to its
    place in the batch (None: row i is message i). ``modes`` (``types.IfExists``
    per row) and ``dedup_ids`` are None when no row asks for a key check (the
    window and the dedup id are also in the rows' headers: ``formats.keyheaders``)."""

    topics: str | list[str]
    deliver_at_ms: np.ndarray
    keys: list[bytes] | None
    headers: list[bytes] | None
    bodies: list[bytes]
    body_sizes: np.ndarray
    origin: np.ndarray | None = None
    modes: np.ndarray | None = None
    dedup_ids: list[bytes] | None = None

    @property
    def checked(self) -> bool:
        """Whether a row asks for a key or dedup check (``timers.bykey``)."""
        return self.modes is not None or self.dedup_ids is not None

    @classmethod
    def of(cls, items: Sequence[Prepared]) -> Columns:
        """Columns of already prepared items (all kept)."""
        keys = [it.key for it in items]
        headers = [it.headers for it in items]
        bodies = [it.body for it in items]
        modes = [it.if_exists for it in items]
        dedups = [it.dedup_id for it in items]
        return cls(
            [it.topic for it in items],
            np.fromiter((it.deliver_at_ms for it in items), dtype=np.int64, count=len(items)),
            keys if any(keys) else None,
            headers if any(headers) else None,
            bodies,
            np.fromiter(map(len, bodies), dtype=np.int64, count=len(bodies)),
            None,
            np.array(modes, dtype=np.int64) if any(modes) else None,
            dedups if any(dedups) else None,
        )

    def take(self, rows: np.ndarray) -> Columns:
        """The columns of ``rows`` only (positions into these columns)."""
        pick = rows.tolist()
        topics = self.topics if isinstance(self.topics, str) else [self.topics[i] for i in pick]
        return Columns(
            topics,
            self.deliver_at_ms[rows],
            None if self.keys is None else [self.keys[i] for i in pick],
            None if self.headers is None else [self.headers[i] for i in pick],
            [self.bodies[i] for i in pick],
            self.body_sizes[rows],
            rows if self.origin is None else self.origin[rows],
            None if self.modes is None else self.modes[rows],
            None if self.dedup_ids is None else [self.dedup_ids[i] for i in pick],
        )
