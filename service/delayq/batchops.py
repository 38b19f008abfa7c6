"""Operations on a batch, each in a single C call (pure): cutting one buffer or
string into many pieces, picking and joining rows of a record array, a batch's
smallest and largest value, its rows by topic; and ``FEW``, the size below which
batch code takes its items one at a time.

Batch encoders cut a joined buffer into per-record slices (to CRC them, to split
fixed-size headers, to split concatenated token text). A list comprehension
of slices costs a bytecode loop per piece; ``operator.itemgetter`` over
prepared ``slice`` objects does the same work in C. Getters for a regular
layout (``count`` pieces, ``stride`` apart) are cached by their shape.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

# numpy imports numpy.ma on the first ``np.unique`` call (its masked-array check),
# ~25 ms. Engine paths call np.unique under the engine's lock mid-traffic (the first
# batch of ids crossing a width, a cancel naming an id twice, several topics in a
# batch): import it with numpy instead.
import numpy.ma

__all__ = [
    "FEW",
    "TopicIds",
    "by_topic",
    "first_of_each",
    "high",
    "join_rows",
    "low",
    "rows_at",
    "spans",
    "strided",
    "take_rows",
]

FEW = 8
"""Batches smaller than this are handled one item at a time by the batch helpers
that have a scalar path: numpy's set-up costs about 1 µs per call and a batch
path makes a few dozen calls, more than a few items cost one by one."""

low, high = np.minimum.reduce, np.maximum.reduce
"""The smallest and largest element of an array: the ufuncs' own reductions
(``ndarray.min``/``max`` add a Python-level wrapper per call)."""


@functools.lru_cache(maxsize=512)
def _strided(count: int, stride: int, size: int, offset: int) -> operator.itemgetter[Any]:
    return operator.itemgetter(
        *(slice(i, i + size) for i in range(offset, offset + count * stride, stride))
    )


def strided(data: Any, count: int, stride: int, size: int | None = None, offset: int = 0) -> Any:
    """``count`` pieces of ``data``: piece i is ``data[offset + i*stride:][:size]``
    (``size`` defaults to ``stride``). Returns a tuple."""
    if count == 0:
        return ()
    if count == 1:
        return (data[offset : offset + (stride if size is None else size)],)
    return _strided(count, stride, stride if size is None else size, offset)(data)


def first_of_each(values: np.ndarray) -> np.ndarray:
    """A mask of the rows whose value no earlier row has (a seq named twice counts once)."""
    first = np.zeros(len(values), dtype=bool)
    first[np.unique(values, return_index=True)[1]] = True
    return first


def take_rows(records: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``records[index]`` for a 1-D structured array (``index``: positions or a
    boolean mask), as a new array. numpy copies a structured element field by
    field (~55 ns a row); viewed as opaque blocks of its size, a row is one copy
    (~5 ns): 50,000 rows in 0.3 instead of 2.8 ms."""
    blocks = records.view(np.dtype((np.void, records.dtype.itemsize)))
    picked: np.ndarray = blocks[index].view(records.dtype)
    return picked


def join_rows(parts: Sequence[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Record arrays of one ``dtype`` end to end, as a new (writable) array.
    ``np.concatenate`` re-checks a structured dtype field by field for every part:
    a fired slot's ~100 chain blocks took ~1.2 ms more that way than joined as bytes."""
    if len(parts) == 1:
        return parts[0].copy()
    joined: np.ndarray = np.frombuffer(bytearray().join(p.tobytes() for p in parts), dtype)
    return joined


def rows_at(data: Any, offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The records of ``dtype`` starting at byte ``offsets`` (any alignment; each
    must lie whole inside ``data``) of a buffer, as a new array. A gather of bytes
    (``raw[offsets[:, None] + arange(size)]``) moves one byte per index; here the
    buffer is viewed as overlapping opaque rows, one starting at every byte, and
    each picked row is one copy: 100 rows of 68 bytes in 2 instead of 12 µs."""
    size = dtype.itemsize
    starts = max(len(data) - size + 1, 0)
    window = np.ndarray((starts,), np.dtype((np.void, size)), buffer=data, strides=(1,))
    picked: np.ndarray = window[offsets].view(dtype)
    return picked


def spans(data: Any, starts: Sequence[int], ends: Sequence[int]) -> Any:
    """Pieces ``data[starts[i]:ends[i]]`` for every i. Returns a tuple."""
    if len(starts) == 1:
        return (data[starts[0] : ends[0]],)
    if not starts:
        return ()
    return operator.itemgetter(*map(slice, starts, ends))(data)


TopicIds = int | np.ndarray | list[int]
"""The topic of every row of a batch: one id for all, or one per row."""


def by_topic(tids: TopicIds) -> list[tuple[int, slice | np.ndarray]]:
    """Each distinct topic id of a batch with what selects its rows: the whole
    batch (a slice, no copy) when it holds one topic, the usual case; masks
    otherwise."""
    if isinstance(tids, int):
        return [(tids, slice(None))]
    tids = np.asarray(tids)
    if not len(tids):
        return []
    first = int(tids[0])
    if bool(np.equal(tids, first).all()):
        return [(first, slice(None))]
    return [(int(t), tids == t) for t in np.unique(tids).tolist()]
