"""The engine calls of gathered callers (``Batches``): each caller's call checked
on its own under the node's shard map, then one engine call for all that passed
(``server.gathering`` gathers them; ``calls`` runs these on the pool or the loop).

Invariants: a caller's refusal (a key, id or receipt another shard's, a malformed
batch) is its answer alone; an error of an engine call (any exception) is the
answer of every caller in that call and of no other; a caller's checks and its
engine call run in one go on one thread, as an ungathered call's did. Answers are
in the callers' order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..argchecks import check_topic
from ..engine import BatchOutcome, CancelOutcome, Engine, ScheduleBatch
from ..errors import DelayqError
from .gathering import merged, renumbered, split, whole
from .ownership import Mode, check_ids, check_keys, check_receipts
from .topology import Topology

__all__ = ["Batches", "Settle"]

T = TypeVar("T")

_PLACE = BatchOutcome([], [], {})


@dataclass(frozen=True, slots=True)
class Settle:
    """A settling call's receipts: those of callers with equal ``key`` (what is done,
    topic, group, a duration) are settled by one engine call, ``settle``."""

    key: tuple[object, ...]
    receipts: Sequence[str]
    field: str
    settle: Callable[[list[str]], Sequence[Any]]


def _spread(
    out: list[Any],
    at: list[int],
    lists: list[Sequence[str]],
    fn: Callable[[list[str]], Sequence[T]],
) -> None:
    """``fn`` of ``lists`` joined, its answers put back as one list per ``at`` index
    of ``out`` (or its error, for each: any exception, so that one engine call's
    failure is the answer of its callers alone, not of others settled before it)."""
    if not at:
        return
    try:
        got = fn([x for one in lists for x in one])
    except Exception as exc:
        for k in at:
            out[k] = exc
        return
    start = 0
    for k, one in zip(at, lists, strict=True):
        n = len(one)
        part: list[Any] = list(got[start : start + n])
        for i, x in enumerate(part):
            if isinstance(x, DelayqError):
                part[i] = renumbered(x, start + i, i, n)
        out[k] = part
        start += n


class Batches:
    def __init__(self, engine: Engine, topology: Topology) -> None:
        self._engine = engine
        self._topology = topology
        self._shard = engine.settings.shard

    def owns_ids(self, ids: Sequence[str], field: str, mode: Mode) -> None:
        """Refuse ids of messages this shard does not hold (``ownership.check_ids``)."""
        t = self._topology
        check_ids(t.map, self._shard, ids, field, self._engine.imported, mode)

    def schedule(self, batches: list[ScheduleBatch]) -> list[BatchOutcome | Exception]:
        """Each batch's outcome or error: its keys checked, then those that passed
        scheduled as one batch (one whose columns do not match its bodies alone: the
        engine says what is wrong)."""
        t = self._topology
        m, moving = t.map, t.moving()
        out: list[BatchOutcome | Exception] = []
        fit: list[int] = []
        for k, b in enumerate(batches):
            try:
                check_keys(m, self._shard, b.keys or [""] * len(b.bodies), moving)
                if isinstance(b.topic, str):
                    check_topic(b.topic)
                if not whole(b):
                    out.append(self._engine.schedule_batch(b))
                    continue
            except Exception as exc:  # this caller's alone (see _spread)
                out.append(exc)
                continue
            out.append(_PLACE)  # its part of the merged batch, below
            fit.append(k)
        if fit:
            try:
                got = self._engine.schedule_batch(merged([batches[k] for k in fit]))
                parts: list[BatchOutcome | Exception] = list(
                    split(got, [len(batches[k].bodies) for k in fit])
                )
            except Exception as exc:
                parts = [exc] * len(fit)
            for k, part in zip(fit, parts, strict=True):
                out[k] = part
        return out

    def cancel(
        self, asked: list[tuple[Sequence[str], Mode]]
    ) -> list[list[CancelOutcome | DelayqError] | Exception]:
        """Each caller's ids checked, then those of all that passed cancelled at once."""
        out: list[list[CancelOutcome | DelayqError] | Exception] = []
        fit: list[int] = []
        for k, (ids, mode) in enumerate(asked):
            try:
                self.owns_ids(ids, "ids", mode)
            except DelayqError as exc:
                out.append(exc)
                continue
            out.append([])
            fit.append(k)
        _spread(out, fit, [asked[k][0] for k in fit], self._engine.cancel)
        return out

    def settle(self, asked: list[Settle]) -> list[list[Any] | Exception]:
        """Each caller's receipts checked, then those of callers with one key settled
        by one engine call."""
        m = self._topology.map
        out: list[list[Any] | Exception] = []
        by_key: dict[tuple[object, ...], list[int]] = {}
        for k, a in enumerate(asked):
            try:
                check_receipts(m, self._shard, a.receipts)
            except DelayqError as exc:
                out.append(exc)
                continue
            out.append([])
            by_key.setdefault(a.key, []).append(k)
        for at in by_key.values():
            _spread(out, at, [asked[k].receipts for k in at], asked[at[0]].settle)
        return out
