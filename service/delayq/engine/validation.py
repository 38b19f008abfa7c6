"""Validation of client input (pure), at the engine's boundary: the timer
pipeline below takes only what passed (``timers.columns``). Every error names the
offending field.

Two ways in, one set of rules: ``prepare`` judges one ``ScheduleRequest`` and says
exactly what is wrong; ``prepare_columns`` judges a whole batch with a few
vectorised tests that only pass what ``prepare`` would accept unchanged (plain
bytes bodies, no key or a printable ASCII one, an ``if_exists`` with a key, no
headers, due times in range) and hands every other
message to ``prepare`` — so both give the same results and the same errors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..argchecks import MAX_HEADER_BYTES, MAX_HEADERS, check_topic, name_problem
from ..batchops import high, low
from ..errors import InvalidArgument
from ..formats.headers import encode_headers
from ..formats.imports import MOVED_FROM
from ..formats.keyheaders import RESERVED, dedup_headers
from ..recurrence.spec import SCHEDULE_HEADER, SCHEDULE_TIME_HEADER
from ..settings import EngineSettings
from ..timers.columns import Columns, Prepared
from ..types import IfExists, ScheduleBatch, ScheduleRequest
from .keychecks import MAX_KEY_BYTES, check_dedup, check_key, plain_key

__all__ = [
    "MAX_KEY_BYTES",
    "batch_of",
    "copyable",
    "prepare",
    "prepare_columns",
    "resolve_due",
]

_RESERVED = (MOVED_FROM, *RESERVED, SCHEDULE_HEADER, SCHEDULE_TIME_HEADER)
"""Headers that are delayq's own: clients cannot set them (the last two: those
the firer of a recurring schedule sets, ``engine.planrows``; a copy of a firing
carries them apart, ``timers.columns.prepare_copy``)."""
_NOT_COPIED = (*RESERVED, SCHEDULE_HEADER, SCHEDULE_TIME_HEADER)
"""delayq's own headers a new message made of a stored one leaves out (``copyable``)."""
_WHEN = ("deliver_at_ms", "delay_ms", "delay_level")
"""The ways to say when, of which a message gives at most one."""


def copyable(headers: Mapping[str, str]) -> dict[str, str]:
    """A stored message's headers for a new message the engine makes of it (a dead
    letter's copy), which passes as a client's: without its dedup hold and id (the
    copy holds neither) and a recurring schedule's firing marks (the copy is no
    firing; its key still names the schedule)."""
    return {k: v for k, v in headers.items() if k not in _NOT_COPIED}


def resolve_due(
    deliver_at_ms: int | None,
    delay_ms: int | None,
    now_ms: int,
    settings: EngineSettings,
    prefix: str = "",
    *,
    delay_level: int | None = None,
) -> int:
    """The effective delivery time: an absolute time, now + delay, or now + the delay of
    level ``delay_level`` (RocketMQ 4's 1..N of ``settings.delay_levels_ms``); none of
    them: now. A time in the past means now; beyond ``max_delay_ms`` is refused."""
    if (deliver_at_ms is not None) + (delay_ms is not None) + (delay_level is not None) > 1:
        given = [
            name
            for name, value in zip(_WHEN, (deliver_at_ms, delay_ms, delay_level), strict=True)
            if value is not None
        ]
        raise InvalidArgument(
            prefix + given[0], f"give only one of {', '.join(_WHEN)}; got {' and '.join(given)}"
        )
    if delay_level is not None:
        levels = settings.delay_levels_ms
        if not 1 <= delay_level <= len(levels):
            raise InvalidArgument(
                prefix + "delay_level",
                f"must be 1..{len(levels)} (the server's --delay-levels), got {delay_level}",
            )
        return now_ms + levels[delay_level - 1]
    if delay_ms is not None:
        if delay_ms < 0:
            raise InvalidArgument(prefix + "delay_ms", f"must be >= 0, got {delay_ms}")
        if delay_ms > settings.max_delay_ms:
            raise InvalidArgument(
                prefix + "delay_ms",
                f"{delay_ms} ms exceeds the maximum delay of {settings.max_delay_ms} ms",
            )
        return now_ms + delay_ms
    if deliver_at_ms is not None:
        if deliver_at_ms < 0:
            raise InvalidArgument(prefix + "deliver_at_ms", "must be >= 0 (ms since the epoch)")
        if deliver_at_ms - now_ms > settings.max_delay_ms:
            raise InvalidArgument(
                prefix + "deliver_at_ms",
                f"is {deliver_at_ms - now_ms} ms ahead; the maximum delay is "
                f"{settings.max_delay_ms} ms",
            )
        return max(deliver_at_ms, now_ms)
    return now_ms


def prepare(
    req: ScheduleRequest, now_ms: int, settings: EngineSettings, prefix: str = ""
) -> Prepared:
    """Validate one request; ``prefix`` (e.g. "messages[3].") goes before field names.

    Hot path: field names are only built when there is an error to report."""
    topic = req.topic
    if not (isinstance(topic, str) and topic and not name_problem(topic)):
        check_topic(topic, prefix + "topic")
    body = req.body
    if type(body) is not bytes:
        if not isinstance(body, bytearray | memoryview):
            raise InvalidArgument(prefix + "body", "must be bytes")
        body = bytes(body)
    if not 0 < len(body) <= settings.max_body_bytes:
        if not body:
            raise InvalidArgument(prefix + "body", "must not be empty")
        raise InvalidArgument(
            prefix + "body", f"is {len(body)} bytes; at most {settings.max_body_bytes}"
        )
    delay = req.delay_ms
    if (
        req.deliver_at_ms is None
        and delay is not None
        and 0 <= delay <= settings.max_delay_ms
        and req.delay_level is None
    ):
        due = now_ms + delay  # the common case, checked inline
    else:
        due = resolve_due(
            req.deliver_at_ms, delay, now_ms, settings, prefix, delay_level=req.delay_level
        )
    key = check_key(req.key, prefix + "key", empty=True)
    headers = _encode_checked_headers(req.headers, prefix) if req.headers else b""
    if req.if_exists or req.dedup_window_ms or req.dedup_id:
        window, dedup_id = req.dedup_window_ms, req.dedup_id
        mode, dedup = check_dedup(req, key, settings, prefix)
        headers += dedup_headers(now_ms + window if window else 0, dedup_id)
        return Prepared(topic, due, key, headers, body, mode, dedup)
    return Prepared(topic, due, key, headers, body)


def _encode_checked_headers(headers: dict[str, str], prefix: str) -> bytes:
    if len(headers) > MAX_HEADERS:
        raise InvalidArgument(prefix + "headers", f"{len(headers)} entries; at most {MAX_HEADERS}")
    for k, v in headers.items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise InvalidArgument(
                prefix + "headers", "keys must be non-empty strings, values strings"
            )
    for name in _RESERVED:
        if name in headers:
            raise InvalidArgument(prefix + "headers", f"{name} is delayq's own header")
    data = encode_headers(headers)
    if len(data) > MAX_HEADER_BYTES:
        raise InvalidArgument(
            prefix + "headers", f"take {len(data)} bytes; at most {MAX_HEADER_BYTES}"
        )
    return data


def _int_column(values: Sequence[int] | np.ndarray | None, n: int, field: str) -> np.ndarray | None:
    if values is None:
        return None
    if len(values) != n:
        raise InvalidArgument(field, f"has {len(values)} values for {n} bodies")
    try:
        return np.asarray(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(field, f"must hold integers: {exc}") from exc


def _int_rows(
    values: Sequence[int] | np.ndarray | None, n: int, field: str, slow: set[int]
) -> np.ndarray | None:
    """``_int_column`` of a column judged row by row: a row whose value is no
    integer (a float, a bool) is 0 in it and joins ``slow``, where ``prepare``
    words its error (a cast would make 1.7 a 1)."""
    if values is None or (isinstance(values, np.ndarray) and values.dtype.kind in "iu"):
        return _int_column(values, n, field)
    if set(map(type, values)) - {int}:
        odd = {
            i for i, v in enumerate(values) if type(v) is not int and not isinstance(v, np.integer)
        }
        slow.update(odd)
        values = [0 if i in odd else v for i, v in enumerate(values)]
    return _int_column(values, n, field)


def _time_column(
    values: Sequence[int] | np.ndarray | None, n: int, field: str
) -> np.ndarray | None:
    """A time column, or None when it gives nothing (all 0: "not given"), so the
    servicer's all-zero columns of the oneof members a batch does not use cost no
    bounds, conflict or level tests."""
    col = _int_column(values, n, field)
    return col if col is not None and col.any() else None


def _more_than_one(whens: list[np.ndarray]) -> np.ndarray:
    """Rows that give more than one of the time columns (0: not given)."""
    given: np.ndarray = np.stack(whens) != 0
    more: np.ndarray = given.sum(axis=0) > 1
    return more


def _level_delays(settings: EngineSettings) -> np.ndarray:
    """Delay (ms) by level, 0 for level 0 ("not given"): a lookup table for a column."""
    return np.array((0, *settings.delay_levels_ms), dtype=np.int64)


def _optional_column(values: Sequence[object] | None, n: int, field: str) -> list[int]:
    """Rows where an optional column (keys, headers) has a value."""
    if values is None:
        return []
    if len(values) != n:
        raise InvalidArgument(field, f"has {len(values)} values for {n} bodies")
    return [i for i, v in enumerate(values) if v]


def prepare_columns(
    batch: ScheduleBatch,
    now_ms: int,
    settings: EngineSettings,
    row: Callable[[int], ScheduleRequest] | None = None,
    suspects: Iterable[int] = (),
) -> tuple[Columns, dict[int, InvalidArgument]]:
    """Validate a batch; return the accepted rows and an error per refused index.

    Rows the vectorised tests cannot pass, and ``suspects``, go through ``prepare``
    with ``row(i)`` (default: the request rebuilt from the batch's columns).
    Raises ``InvalidArgument`` only for a malformed batch (columns of different
    lengths, a single topic that is invalid)."""
    bodies = list(batch.bodies)
    n = len(bodies)
    at = _time_column(batch.deliver_at_ms, n, "deliver_at_ms")
    delay = _time_column(batch.delay_ms, n, "delay_ms")
    level = _time_column(batch.delay_level, n, "delay_level")
    whens = [c for c in (at, delay, level) if c is not None]
    slow = set(suspects)
    keys, modes = _keys_and_modes(batch, n, slow)
    slow.update(_optional_column(batch.headers, n, "headers"))
    slow.update(_optional_column(batch.dedup_ids, n, "dedup_ids"))
    windows = _int_rows(batch.dedup_window_ms, n, "dedup_window_ms", slow)
    if windows is not None:
        slow.update(np.flatnonzero(windows).tolist())
    topic = batch.topic
    if isinstance(topic, str):
        check_topic(topic)
        topics: str | list[str] = topic
    else:
        topics = list(topic)
        if len(topics) != n:
            raise InvalidArgument("topic", f"has {len(topics)} values for {n} bodies")
        bad = {t for t in set(topics) if not isinstance(t, str) or not t or name_problem(t)}
        if bad:
            slow.update(i for i, t in enumerate(topics) if t in bad)
    if set(map(type, bodies)) - {bytes}:
        slow.update(i for i, b in enumerate(bodies) if type(b) is not bytes)
        sizes = np.fromiter((len(b) if type(b) is bytes else 1 for b in bodies), np.int64, n)
    else:
        sizes = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
    # whole-column bounds first (a few reductions); the per-row mask only when one fails
    limit, most = settings.max_delay_ms, settings.max_body_bytes
    n_levels = len(settings.delay_levels_ms)
    if n and (
        low(sizes) <= 0
        or high(sizes) > most
        or (at is not None and (low(at) < 0 or high(at) - now_ms > limit))
        or (delay is not None and (low(delay) < 0 or high(delay) > limit))
        or (level is not None and (low(level) < 0 or high(level) > n_levels))
        or (len(whens) > 1 and _more_than_one(whens).any())
    ):
        zeros = np.zeros(n, dtype=np.int64)
        a, d, lv = (c if c is not None else zeros for c in (at, delay, level))
        odd = (sizes <= 0) | (sizes > most) | (a < 0) | (a - now_ms > limit)
        odd |= (d < 0) | (d > limit) | (lv < 0) | (lv > n_levels)
        if len(whens) > 1:
            odd |= _more_than_one(whens)
        slow.update(np.flatnonzero(odd).tolist())
    if level is not None:  # a level is its delay; rows that also give one are slow
        by_level = _level_delays(settings)[np.clip(level, 0, n_levels)]
        delay = by_level if delay is None else delay + by_level
    if delay is None:
        dues = np.maximum(at, now_ms) if at is not None else np.full(n, now_ms, dtype=np.int64)
    else:
        dues = now_ms + delay if at is None else np.maximum(at, now_ms + delay)
    if not slow:
        return Columns(topics, dues, keys, None, bodies, sizes, None, modes), {}
    fast = Columns(topics, dues, keys, None, bodies, sizes, None, modes)
    return _prepare_rows(batch, fast, sorted(slow), now_ms, settings, row)


def _plain_keys(keys: Sequence[str]) -> list[bytes] | None:
    """Every key encoded when all are plain (non-empty printable ASCII within the
    limit: a few C-speed passes over the column, no Python step a row); else None."""
    try:
        joined = "".join(keys)
    except TypeError:  # not all strings
        return None
    if not (joined.isascii() and joined.isprintable()):
        return None
    sizes = list(map(len, keys))
    if min(sizes, default=0) == 0 or max(sizes) > MAX_KEY_BYTES:
        return None
    return list(map(str.encode, keys))


def _keys_and_modes(
    batch: ScheduleBatch, n: int, slow: set[int]
) -> tuple[list[bytes] | None, np.ndarray | None]:
    """The keys (encoded) and ``if_exists`` columns of the rows that pass by the
    common case (``keychecks.plain_key``, a mode 1..3 with a key); others join
    ``slow``. None where a column is all empty (or all NONE)."""
    keys: list[bytes] | None = None
    if batch.keys is not None:
        if len(batch.keys) != n:
            raise InvalidArgument("keys", f"has {len(batch.keys)} values for {n} bodies")
        keys = _plain_keys(batch.keys)
        if keys is None:  # not all plain (or some empty): row by row
            keys = [b""] * n
            for i, k in enumerate(batch.keys):
                if k:
                    if type(k) is str and plain_key(k):
                        keys[i] = k.encode()
                    else:
                        slow.add(i)
            if not any(keys):
                keys = None
    modes = _int_rows(batch.if_exists, n, "if_exists", slow)
    if modes is None or not modes.any():
        return keys, None
    bad = (modes < 0) | (modes > len(IfExists) - 1)
    if keys is None:
        bad |= modes != 0
    else:
        bad |= (modes != 0) & (np.fromiter(map(len, keys), np.int64, n) == 0)
    slow.update(np.flatnonzero(bad).tolist())
    return keys, modes


def _prepare_rows(
    batch: ScheduleBatch,
    fast: Columns,
    slow: list[int],
    now_ms: int,
    settings: EngineSettings,
    row: Callable[[int], ScheduleRequest] | None,
) -> tuple[Columns, dict[int, InvalidArgument]]:
    """``prepare`` for the rows the fast tests did not pass; merge them back into
    the columns of those that did (``fast``)."""
    topics, dues, bodies, sizes = fast.topics, fast.deliver_at_ms, fast.bodies, fast.body_sizes
    n = len(bodies)
    get = row or functools.partial(_batch_row, batch)
    keys: list[bytes] = [b""] * n if fast.keys is None else fast.keys
    headers: list[bytes] = [b""] * n
    modes = np.zeros(n, dtype=np.int64) if fast.modes is None else fast.modes.copy()
    dedups: list[bytes] = [b""] * n
    errors: dict[int, InvalidArgument] = {}
    for i in slow:
        try:
            item = prepare(get(i), now_ms, settings)
        except InvalidArgument as exc:
            errors[i] = exc
            continue
        dues[i] = item.deliver_at_ms
        keys[i], headers[i], bodies[i] = item.key, item.headers, item.body
        modes[i], dedups[i] = item.if_exists, item.dedup_id
        if not isinstance(topics, str):
            topics[i] = item.topic
        sizes[i] = len(item.body)
    cols = Columns(
        topics,
        dues,
        keys if any(keys) else None,
        headers if any(headers) else None,
        bodies,
        sizes,
        None,
        modes if modes.any() else None,
        dedups if any(dedups) else None,
    )
    if not errors:
        return cols, errors
    keep = np.ones(n, dtype=bool)
    keep[list(errors)] = False
    return cols.take(np.flatnonzero(keep)), errors


def _batch_row(batch: ScheduleBatch, i: int) -> ScheduleRequest:
    """Message ``i`` of a batch as a request (0 in a time column: not given)."""

    def pick(col: Sequence[int] | np.ndarray | None) -> int | None:
        return int(col[i]) or None if col is not None else None

    def given(col: Sequence[int] | np.ndarray | None) -> object:
        return col[i] if col is not None else 0

    topic = batch.topic if isinstance(batch.topic, str) else batch.topic[i]
    headers: Mapping[str, str] = batch.headers[i] if batch.headers is not None else {}
    return ScheduleRequest(
        topic=topic,
        body=batch.bodies[i],
        deliver_at_ms=pick(batch.deliver_at_ms),
        delay_ms=pick(batch.delay_ms),
        delay_level=pick(batch.delay_level),
        key=batch.keys[i] if batch.keys is not None else "",
        headers=dict(headers) if headers else {},
        if_exists=_as_int(given(batch.if_exists)),  # type: ignore[arg-type]
        dedup_window_ms=_as_int(given(batch.dedup_window_ms)),
        dedup_id=batch.dedup_ids[i] if batch.dedup_ids is not None else "",
    )


def _as_int(value: object) -> int:
    """A column's value as a Python int (numpy's too) for ``prepare`` to judge (a
    bool left as it is: no integer there)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return value  # type: ignore[return-value]
    return int(value)


def batch_of(requests: list[ScheduleRequest]) -> tuple[ScheduleBatch, list[int]]:
    """Requests as one batch of columns, and the rows whose meaning columns cannot
    carry, for ``prepare`` to word their error: those giving more than one of a time,
    a delay and a level, and those giving level 0 (in columns, 0 means "not given")."""
    n = len(requests)
    ats = [r.deliver_at_ms for r in requests]
    delays = [r.delay_ms for r in requests]
    levels = [r.delay_level for r in requests]
    given = [col if col.count(None) < n else None for col in (ats, delays, levels)]
    present = [col for col in given if col is not None]
    suspects: list[int] = []
    if len(present) > 1:
        suspects = [
            i for i, row in enumerate(zip(*present, strict=True)) if len(row) - row.count(None) > 1
        ]
    if 0 in levels:
        suspects += [i for i, lv in enumerate(levels) if lv == 0]
    at_col, delay_col, level_col = (None if col is None else [v or 0 for v in col] for col in given)
    batch = ScheduleBatch(
        topic=[r.topic for r in requests],
        bodies=[r.body for r in requests],
        deliver_at_ms=at_col,
        delay_ms=delay_col,
        delay_level=level_col,
        keys=[r.key for r in requests],
        headers=[r.headers for r in requests],
    )
    if any(r.if_exists or r.dedup_window_ms or r.dedup_id for r in requests):
        batch.if_exists = [r.if_exists for r in requests]
        batch.dedup_window_ms = [r.dedup_window_ms for r in requests]
        batch.dedup_ids = [r.dedup_id for r in requests]
    return batch, suspects
