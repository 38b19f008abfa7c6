"""Generate the blocking client, ``service/delayq/client/sync.py``, from the asyncio
one, ``aio.py`` (the way httpx and redis-py keep their twins in step: unasync).

    python scripts/gen_sync_client.py           # write sync.py
    python scripts/gen_sync_client.py --check   # exit 1 when sync.py is not what it writes

Rules, applied to Python tokens (never inside strings or comments, so a
docstring's "async" stays): ``async``/``await`` go; names map by ``NAMES``
(``AsyncClient`` -> ``Client``, ``_aio_io`` -> ``_sync_io``, ``__aenter__`` ->
``__enter__`` ...), also where a string is just such a name (``__all__``). The
module docstring is replaced by ``DOCSTRING``. The output is formatted by ruff
as the repository is. Invariant: the generated file is a
pure function of ``aio.py``; ``tests/client/test_sync_generated.py`` checks the
committed one.
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
SOURCE = ROOT / "service" / "delayq" / "client" / "aio.py"
TARGET = ROOT / "service" / "delayq" / "client" / "sync.py"

NAMES = {
    "AsyncClient": "Client",
    "AsyncSubscription": "Subscription",
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

HEADER = (
    "# GENERATED from aio.py by scripts/gen_sync_client.py: edit aio.py, then run it.\n"
    "# ruff: noqa: UP028  (an async for that yields reads as a yield from once unasynced)\n"
)
DOCSTRING = '''"""``delayq.Client``: the blocking client of a delayq cluster, and its
``Subscription``; generated from ``aio.py`` (``AsyncClient``), which documents
both. Thread-safety: a Client may be shared by threads (gRPC channels are);
``producer()`` gives a ``Producer`` that is safe to ``send`` from many threads.
"""'''


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


def _replace_docstring(source: str) -> str:
    tree = ast.parse(source)
    first = tree.body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    lines = source.splitlines(keepends=True)
    assert first.end_lineno is not None
    return HEADER + DOCSTRING + "\n" + "".join(lines[first.end_lineno :])


def _ruff_format(source: str) -> str:
    """``source`` as ruff formats and import-sorts it (with the repository's settings)."""
    ruff = Path(sys.executable).with_name("ruff")
    cmd = str(ruff) if ruff.exists() else "ruff"
    for args in (["check", "--fix-only", "--select", "I,F401", "--quiet"], ["format", "--quiet"]):
        done = subprocess.run(
            [cmd, *args, "--stdin-filename", str(TARGET), "-"],
            input=source,
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        source = done.stdout
    return source


def generate() -> str:
    """What ``sync.py`` should hold."""
    return _ruff_format(_replace_docstring(unasync(SOURCE.read_text())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when sync.py differs from the output"
    )
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run scripts/gen_sync_client.py")
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
