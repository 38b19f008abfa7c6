"""The signing secrets of push targets (``SecretStore``), read from the server's
``--push-secret-dir`` by reference.

A target names its secret by ``secret_ref`` (never the secret itself: the API,
the log and the record carry only the reference). ``<dir>/<ref>`` is either a
file, one ``whsec_<base64>`` per line (blank lines skipped), or a directory: each
regular file whose name starts with no dot holds one secret (a mounted
Kubernetes Secret: its keys, e.g. ``current`` and ``previous``; its ``..data``
links skipped), taken in the order of their names. A ref is ``name`` or
``name/key`` (``inside``): no ``..``, no absolute path, so an API caller cannot make
the server sign with /etc's files.

Several secrets at once are a rotation: a request carries one signature per
secret. The files are read again at most every ``LOOK_S`` seconds (a Secret
volume's update rotates the keys without a restart). A ref that is missing,
unreadable or holds no valid secret has no keys (None): its pusher sends nothing.

Invariant: no secret's text reaches a log line, an error or a repr: errors name
the ref only. ``keys`` is a coroutine of the pushers' event loop (its cache is
the loop's; the files read in a worker thread); ``resolves`` reads afresh, from
any thread but the loop's (the check of a ref set, in the calls pool).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from .signing import Key, parse_key

__all__ = ["LOOK_S", "SecretStore", "inside"]

LOOK_S = 5.0  # how stale a ref's keys may be: a rotation reaches pushes within this


def inside(ref: str) -> bool:
    """Whether ``ref`` stays inside the secret dir: one or two parts, none empty
    or starting with a dot (no ``..``, no ``..data``, no absolute path), no
    backslash. (``pushtarget.check`` has judged its characters at set time; this
    is the file system's own guard, for refs of older records too.)"""
    parts = ref.split("/")
    return len(parts) <= 2 and all(p and not p.startswith(".") and "\\" not in p for p in parts)


def read_keys(path: Path) -> tuple[Key, ...] | None:
    """The keys at ``path`` (a file of lines or a directory of files), None when
    it holds none or is not readable."""
    try:
        if path.is_dir():
            texts = [
                p.read_text()
                for p in sorted(path.iterdir())
                if not p.name.startswith(".") and p.is_file()
            ]
        else:
            texts = path.read_text().splitlines()
        keys = tuple(parse_key(t) for t in texts if t.strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return keys or None


class SecretStore:
    """Keys by ref under ``root`` (None: no secret dir; every ref is missing),
    re-read at most every ``LOOK_S`` of ``now_s`` (a monotonic clock)."""

    def __init__(self, root: Path | None, now_s: Callable[[], float]) -> None:
        self._root = root
        self._now_s = now_s
        self._held: dict[str, tuple[float, tuple[Key, ...] | None]] = {}

    def path(self, ref: str) -> Path | None:
        """Where ``ref`` lives, None when no dir is set or it is no valid ref."""
        if self._root is None or not inside(ref):
            return None
        return self._root / ref

    async def keys(self, ref: str) -> tuple[Key, ...] | None:
        """The keys of ``ref`` (``()``: no ref, requests go unsigned); None when the
        ref names no valid secret here. The files are read off the loop (a
        worker thread), the cache kept on it."""
        if not ref:
            return ()
        now = self._now_s()
        held = self._held.get(ref)
        if held is not None and now - held[0] < LOOK_S:
            return held[1]
        path = self.path(ref)
        keys = None if path is None else await asyncio.to_thread(read_keys, path)
        self._held[ref] = (now, keys)
        return keys

    def resolves(self, ref: str) -> bool:
        """Whether ``ref`` names a valid secret now (read afresh, not cached: safe
        from any thread)."""
        if not ref:
            return True
        path = self.path(ref)
        return path is not None and read_keys(path) is not None
