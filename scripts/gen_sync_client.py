"""Generate the blocking client, ``service/delayq/client/sync.py``,
``subscription.py``, ``routed.py`` and ``scheduling.py``, from the asyncio one,
``aio.py``, ``aiosubscription.py``, ``aiorouted.py`` and ``aioscheduling.py``
(the way httpx and redis-py keep their twins in step: unasync).

    python scripts/gen_sync_client.py           # write the twins
    python scripts/gen_sync_client.py --check   # exit 1 when one is not what it writes

Rules, applied to Python tokens (never inside strings or comments, so a
docstring's "async" stays): ``async``/``await`` go; names map by ``NAMES``
(``AsyncClient`` -> ``Client``, ``_aio_io`` -> ``_sync_io``, ``__aenter__`` ->
``__enter__`` ...), also where a string is just such a name (``__all__``). The
module docstring is replaced by the twin's (``TWINS``). The output is formatted
by ruff as the repository is. Invariant: each generated file is a pure function
of its source; ``tests/client/test_sync_generated.py`` checks the committed ones.
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "service" / "delayq" / "client"
SOURCE = CLIENT / "aio.py"
TARGET = CLIENT / "sync.py"

NAMES = {
    "AsyncClient": "Client",
    "AsyncSubscription": "Subscription",
    "AsyncShell": "Shell",
    "aiosubscription": "subscription",
    "AsyncRouted": "Routed",
    "aiorouted": "routed",
    "AsyncScheduling": "Scheduling",
    "aioscheduling": "scheduling",
    "AsyncIterator": "Iterator",
    "AsyncIterable": "Iterable",
    "AsyncGenerator": "Generator",
    "_aio_io": "_sync_io",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "aclose": "close",
    "StopAsyncIteration": "StopIteration",
}

HEADER = "# GENERATED from aio.py by scripts/gen_sync_client.py: edit that, then run it.\n"
YIELDS = "# ruff: noqa: UP028  (an async for that yields reads as a yield from once unasynced)\n"
"""The header of a twin whose source yields in an ``async for``."""
DOCSTRING = '''"""``delayq.Client``: the blocking client of a delayq cluster; generated
from ``aio.py`` (``AsyncClient``), which documents it. Thread-safety: a Client
may be shared by threads (gRPC channels are); ``producer()`` gives a ``Producer``
that is safe to ``send`` from many threads.
"""'''
SUBSCRIPTION_DOCSTRING = '''"""``delayq.Subscription``: ``Client.subscribe``'s merged stream of
every shard's Subscribe, following failovers and rebalances; generated from
``aiosubscription.py`` (``AsyncSubscription``), which documents it.
"""'''
ROUTED_DOCSTRING = '''"""``delayq.client.routed.Routed``: ``Client``'s base, its shard map and the
running of its calls; generated from ``aiorouted.py`` (``AsyncRouted``), which
documents it.
"""'''
SCHEDULING_DOCSTRING = '''"""``delayq.client.scheduling.Scheduling``: ``Client``'s recurring
schedules (its base); generated from ``aioscheduling.py`` (``AsyncScheduling``), which
documents it.
"""'''
TWINS = {
    SOURCE: (TARGET, DOCSTRING),
    CLIENT / "aiorouted.py": (CLIENT / "routed.py", ROUTED_DOCSTRING),
    CLIENT / "aioscheduling.py": (CLIENT / "scheduling.py", SCHEDULING_DOCSTRING),
    CLIENT / "aiosubscription.py": (CLIENT / "subscription.py", SUBSCRIPTION_DOCSTRING),
}
"""Each asyncio source: the blocking module made of it, and that module's docstring."""


def unasync(source: str) -> str:
    """``source`` with its async parts made blocking (the rules: the module's
    docstring). Each token is edited where it stands: a dropped keyword takes the
    spaces after it along; a renamed name moves what follows on its line."""
    lines = source.splitlines(keepends=True)
    edits: dict[int, list[tuple[int, int, str]]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        (row, start), end = tok.start, tok.end[1]
        if tok.type == tokenize.STRING and tok.string[1:-1] in NAMES:  # a name in __all__
            quote = tok.string[0]
            edits.setdefault(row, []).append((start, end, quote + NAMES[tok.string[1:-1]] + quote))
            continue
        if tok.type != tokenize.NAME:
            continue
        if tok.string in ("async", "await"):
            line = lines[row - 1]
            while end < len(line) and line[end] == " ":
                end += 1
            edits.setdefault(row, []).append((start, end, ""))
        elif tok.string in NAMES:
            edits.setdefault(row, []).append((start, end, NAMES[tok.string]))
    for row, row_edits in edits.items():
        line = lines[row - 1]
        for start, end, new in sorted(row_edits, reverse=True):
            line = line[:start] + new + line[end:]
        lines[row - 1] = line
    return "".join(lines)


def _replace_docstring(source: str, docstring: str = DOCSTRING, name: str = "aio.py") -> str:
    tree = ast.parse(source)
    first = tree.body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    lines = source.splitlines(keepends=True)
    assert first.end_lineno is not None
    header = HEADER.replace("aio.py", name) + (YIELDS if "yield" in source else "")
    return header + docstring + "\n" + "".join(lines[first.end_lineno :])


def _ruff_format(source: str, target: Path = TARGET) -> str:
    """``source`` as ruff formats and import-sorts it (with the repository's settings)."""
    ruff = Path(sys.executable).with_name("ruff")
    cmd = str(ruff) if ruff.exists() else "ruff"
    for args in (["check", "--fix-only", "--select", "I,F401", "--quiet"], ["format", "--quiet"]):
        done = subprocess.run(
            [cmd, *args, "--stdin-filename", str(target), "-"],
            input=source,
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        source = done.stdout
    return source


def generate(source: Path = SOURCE) -> str:
    """What the blocking twin of ``source`` (``sync.py`` of ``aio.py``) should hold."""
    target, docstring = TWINS[source]
    text = _replace_docstring(unasync(source.read_text()), docstring, source.name)
    return _ruff_format(text, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when sync.py differs from the output"
    )
    args = parser.parse_args(argv)
    stale = 0
    for source, (target, _) in TWINS.items():
        text = generate(source)
        if not args.check:
            target.write_text(text)
        elif target.read_text() != text:
            print(f"{target.relative_to(ROOT)} is stale: run scripts/gen_sync_client.py")
            stale = 1
    return stale


if __name__ == "__main__":
    sys.exit(main())
