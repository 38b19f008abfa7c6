"""The rules of keys (pure): a key and a dedup id are 1..``MAX_KEY_BYTES`` bytes of
UTF-8 without control characters (C0, DEL, C1: U+0000-U+001F, U+007F-U+009F);
``if_exists`` is an ``IfExists`` and needs a key; ``dedup_window_ms`` is
0..``EngineSettings.max_dedup_window_ms`` and needs ``if_exists`` or a dedup id.
Every error is ``InvalidArgument`` naming the field. Part of the engine's
validation (``validation.prepare`` calls them for a schedule; the by-key calls
check their key with ``check_key``; ``validation.prepare_columns`` passes a
batch's common case by ``key_column`` and ``mode_column``, a few passes over each
column, and hands every other row to ``prepare``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ..errors import InvalidArgument
from ..settings import EngineSettings
from ..types import IfExists, ScheduleRequest

__all__ = [
    "MAX_KEY_BYTES",
    "check_dedup",
    "check_key",
    "key_column",
    "mode_column",
    "plain_key",
]

MAX_KEY_BYTES = 1024
"""A key (and a dedup id) is 1..1024 bytes of UTF-8 without control characters."""
_CONTROL = re.compile("[\\x00-\\x1f\\x7f-\\x9f]")
"""C0, DEL and C1: not in a key (they would garble logs and terminals)."""
_MODES = frozenset(int(m) for m in IfExists)


def plain_key(key: str) -> bool:
    """Whether ``key`` passes ``check_key`` by its common case alone: printable
    ASCII (no control character: C1 is not ASCII) of at most ``MAX_KEY_BYTES``."""
    return len(key) <= MAX_KEY_BYTES and key.isascii() and key.isprintable()


def check_key(key: object, field: str, *, empty: bool = False) -> bytes:
    """A key (or dedup id) as bytes: a string of 1..``MAX_KEY_BYTES`` bytes of UTF-8
    without control characters (``empty``: "" too, meaning none)."""
    if not isinstance(key, str):
        raise InvalidArgument(field, "must be a string")
    if not key:
        if empty:
            return b""
        raise InvalidArgument(field, "must not be empty")
    if plain_key(key):
        return key.encode()
    data = key.encode(errors="surrogatepass")
    if len(data) > MAX_KEY_BYTES:
        raise InvalidArgument(field, f"is {len(data)} bytes; at most {MAX_KEY_BYTES}")
    bad = _CONTROL.search(key)
    if bad is not None:
        raise InvalidArgument(
            field, f"holds the control character U+{ord(bad.group()):04X} at {bad.start()}"
        )
    try:
        key.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgument(field, "must be valid UTF-8 (a lone surrogate)") from exc
    return data


def check_dedup(
    req: ScheduleRequest, key: bytes, settings: EngineSettings, prefix: str
) -> tuple[int, bytes]:
    """A request's ``if_exists``, ``dedup_window_ms`` and ``dedup_id`` checked; the
    mode and the dedup id as bytes."""
    mode, window = req.if_exists, req.dedup_window_ms
    if isinstance(mode, bool) or not isinstance(mode, int) or mode not in _MODES:
        raise InvalidArgument(
            prefix + "if_exists", f"must be one of {', '.join(m.name for m in IfExists)}"
        )
    if mode and not key:
        raise InvalidArgument(prefix + "if_exists", "needs a key")
    dedup = check_key(req.dedup_id, prefix + "dedup_id", empty=True)
    if isinstance(window, bool) or not isinstance(window, int):
        raise InvalidArgument(prefix + "dedup_window_ms", "must be an integer (ms)")
    if window < 0 or window > settings.max_dedup_window_ms:
        raise InvalidArgument(
            prefix + "dedup_window_ms",
            f"is {window} ms; must be 0..{settings.max_dedup_window_ms} (the server's "
            "--max-dedup-window)",
        )
    if window and not (mode or dedup):
        raise InvalidArgument(
            prefix + "dedup_window_ms", "needs if_exists (reject, keep or replace) and a key"
        )
    return int(mode), dedup


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


def key_column(given: Sequence[str] | None, n: int, slow: set[int]) -> list[bytes] | None:
    """A batch's keys column encoded, of the rows whose key passes by the common
    case (``plain_key``); the others join ``slow``. None when all are empty."""
    if given is None:
        return None
    if len(given) != n:
        raise InvalidArgument("keys", f"has {len(given)} values for {n} bodies")
    keys = _plain_keys(given)
    if keys is not None:
        return keys
    keys = [b""] * n  # not all plain (or some empty): row by row
    for i, k in enumerate(given):
        if k:
            if type(k) is str and plain_key(k):
                keys[i] = k.encode()
            else:
                slow.add(i)
    return keys if any(keys) else None


def mode_column(
    modes: np.ndarray | None, keys: list[bytes] | None, n: int, slow: set[int]
) -> np.ndarray | None:
    """A batch's ``if_exists`` column (read as integers); rows whose mode is no
    ``IfExists`` or has no key (of ``key_column``) join ``slow``. None when all
    are NONE."""
    if modes is None or not modes.any():
        return None
    bad = (modes < 0) | (modes > len(IfExists) - 1)
    if keys is None:
        bad |= modes != 0
    elif not all(keys):  # (all given: the usual checked batch, no length a row)
        bad |= (modes != 0) & (np.fromiter(map(len, keys), np.int64, n) == 0)
    slow.update(np.flatnonzero(bad).tolist())
    return modes
