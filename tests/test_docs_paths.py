"""Every module the docs name exists: the pages under ``docs/``, the README and the
docstrings (and comments) of the project's code name modules by dotted name
(``delayq.control.resharding.next_step``, ``timers.wakeups.Wakeups``) or by path
(``service/delayq/server/admin.py``, ``cluster/scaling.py``); each such name must
resolve to a module, a package or a top-level name of a module on disk, so a module
moved or renamed without its mentions fails here.

Resolution is by the files alone (``ast``, no import): a dotted name whose first part
is one of the project's packages (or a sub-package of ``delayq``, as the docstrings
inside it write them) is walked module by module, and what remains must be a name
the last module defines or imports at its top level. A path resolves from the
repository's root, from ``service/delayq/``, ``operator/delayq_operator/`` or
``spark/delayq_spark/``, or from the directory of the file that names it.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "delayq": ROOT / "service" / "delayq",
    "delayq_operator": ROOT / "operator" / "delayq_operator",
    "delayq_spark": ROOT / "spark" / "delayq_spark",
    "bench": ROOT / "bench",
}
CODE = [ROOT / d for d in ("service", "operator", "spark", "bench", "scripts", "tests")]
PAGES = [
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "README.md",
    *sorted((ROOT / "examples").rglob("README.md")),
]
GENERATED = re.compile(r"_pb2(_grpc)?\.py$")
# a dotted name: two or more identifiers joined by dots, not part of a longer token
# (a file name like x.py, an address like a.b.c:80, a URL or a path)
# or a call (``client.lookup(i)``: a method of a value)
DOTTED = re.compile(r"(?<![\w./:-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w/(-]|\.\w)")
# a path of a module or package: segments joined by /, ending in .py or /
PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+(?:[\w-]+\.py)?)(?![\w/])")
# a dotted name with a part so is a file's name (cluster.json, tls.crt), not a module's
FILE_SUFFIXES = frozenset(
    {"json", "md", "py", "crt", "key", "proto", "yaml", "yml", "log", "idx", "txt", "toml"}
    | {"sh", "svg", "png", "html", "jar", "go", "lock"}
)
# dotted names that read like the service's modules and are not: RocketMQ message
# properties (rocketmq.tag), the JSON fields of a Spark standalone master (cluster.apps)
NOT_MODULES = re.compile(r"rocketmq\.(tag|keys|id|type|born)|cluster\.(master_url|apps)")
# roots a relative path in the service may start from
PATH_ROOTS = [ROOT, *PACKAGES.values()]


def _is_module(path: Path) -> bool:
    return (path.is_file() and path.suffix == ".py") or (path / "__init__.py").is_file()


@functools.cache
def _top_level_names(module: Path) -> frozenset[str]:
    tree = ast.parse(module.read_text(), str(module))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                names.update(n.attr for n in ast.walk(target) if isinstance(n, ast.Attribute))
    return frozenset(names)


def _resolves(dotted: str, *, near: Path | None = None) -> bool | None:
    """True or False for a name of the project's modules; None for any other name
    (``near``: the package of the code that names it, whose sibling modules, and
    those of the packages above it up to ``delayq``, it may name without a prefix)."""
    parts = dotted.split(".")
    if FILE_SUFFIXES.intersection(parts[1:]) or NOT_MODULES.fullmatch(dotted):
        return None
    if parts[0] in PACKAGES:
        return _walk(PACKAGES[parts[0]], parts[1:])
    found: bool | None = None  # a module of that first name somewhere up the chain
    for package in _packages_from(near):
        if _is_module(package / parts[0]) or _is_module(package / f"{parts[0]}.py"):
            if _walk(package, parts):
                return True  # (``top.rows`` in ``cli/top.py`` is ``delayq/top/rows.py``)
            found = False
    return found


def _packages_from(near: Path | None) -> list[Path]:
    """``near`` and the packages above it, up to ``delayq`` (none outside it)."""
    base = PACKAGES["delayq"]
    if near is None or not near.is_relative_to(base):
        return []
    return [near, *[p for p in near.parents if p.is_relative_to(base)]]


def _walk(here: Path, rest: list[str]) -> bool:
    for i, part in enumerate(rest):
        package, module = here / part, here / f"{part}.py"
        if _generated_text(here):
            # a generated package: the rest is a protobuf name (a message, a service)
            return part in _generated_text(here)
        if (package / "__init__.py").is_file():
            here = package
        elif module.is_file():
            return i + 1 == len(rest) or rest[i + 1] in _top_level_names(module)
        else:
            init = here / "__init__.py"
            return init.is_file() and part in _top_level_names(init)
    return True


@functools.cache
def _generated_text(package: Path) -> str:
    """The generated protobuf modules of ``package``, as one text ("" if none)."""
    return "".join(pb2.read_text() for pb2 in sorted(package.glob("*_pb2.py")))


def _path_resolves(path: str, near: Path) -> bool:
    return any((root / path).exists() for root in [*PATH_ROOTS, near])


def _named_in(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, kind, name) of every module name written in ``text``: a dotted name
    without the package's prefix only when quoted as code (``timers.wakeups``), as a
    docstring's example code names values (``report.exit_code``)."""
    for number, line in enumerate(text.splitlines(), 1):
        if "://" in line:
            line = re.sub(r"\S+://\S+", "", line)
        for match in DOTTED.finditer(line):
            name = match.group(1)
            quoted = line[match.end() : match.end() + 1] == "`"
            if quoted or name.split(".")[0] in PACKAGES:
                yield number, "dotted", name
        for match in PATH.finditer(line):
            yield number, "path", match.group(1)


def _texts() -> Iterator[tuple[Path, str, bool]]:
    """Each page and each source's docstrings and comments; whether a dotted name in
    it may be written relative to ``delayq`` (in code, yes; a page names a module by
    its full name or its path; a page's dotted name is more often a method called on
    a value, an engine's schedule, say)."""
    for page in PAGES:
        yield page, page.read_text(), False
    for root in CODE:
        for source in sorted(root.rglob("*.py")):
            if GENERATED.search(source.name) or ".venv" in source.parts:
                continue
            yield source, _docs_of(source), True


def _docs_of(source: Path) -> str:
    """A module's docstrings and comments, each on its own lines (code is left out:
    the import linter and the type checker resolve what the code names)."""
    text = source.read_text()
    tree = ast.parse(text, str(source))
    lines = [""] * len(text.splitlines())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = node.body[0] if node.body else None
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                start, end = doc.lineno - 1, doc.end_lineno or doc.lineno
                lines[start:end] = text.splitlines()[start:end]
    for number, line in enumerate(text.splitlines()):
        if "#" in line and not lines[number]:
            lines[number] = line[line.index("#") :]
    return "\n".join(lines)


def _stale() -> list[str]:
    found = []
    for source, text, relative in _texts():
        near = source.parent
        for number, kind, name in _named_in(text):
            where = f"{source.relative_to(ROOT)}:{number}"
            if kind == "dotted":
                missing = _resolves(name, near=near if relative else None) is False
            else:
                missing = _looks_like_ours(name) and not _path_resolves(name, near)
            if missing:
                found.append(f"{where}: {name}")
    return found


def _looks_like_ours(path: str) -> bool:
    """A path into the repository (not a data directory's entries, a URL's or a
    system path): its first part is a folder of the repository or of a package."""
    first = path.split("/")[0]
    return any((root / first).is_dir() for root in PATH_ROOTS) and not path.startswith(("/", "~"))


def test_every_module_the_docs_name_exists() -> None:
    stale = _stale()
    assert not stale, "names of modules that do not exist:\n" + "\n".join(stale)


@pytest.mark.parametrize(
    ("name", "resolves"),
    [
        ("delayq.control.resharding", True),
        ("delayq.control.resharding.next_step", True),
        ("timers.wakeups.Wakeups", True),
        ("delayq.control.no_such_module", False),
        ("timers.wakeups.NoSuchName", False),
        ("os.path", None),
    ],
)
def test_a_dotted_name_is_resolved_on_disk(name: str, resolves: bool | None) -> None:
    assert _resolves(name, near=PACKAGES["delayq"]) is resolves


def test_a_name_is_resolved_from_its_own_package_up() -> None:
    client = PACKAGES["delayq"] / "client"
    assert _resolves("errors.ClientError", near=client) is True
    assert _resolves("errors.NoSuchError", near=client) is False
    assert _resolves("errors.ClientError", near=PACKAGES["delayq"]) is False  # delayq/errors.py


@pytest.mark.parametrize(
    ("path", "resolves"),
    [
        ("service/delayq/server/admin.py", True),
        ("server/admin.py", True),
        ("timers/stages/", True),
        ("server/no_such_module.py", False),
    ],
)
def test_a_path_is_resolved_from_the_roots(path: str, resolves: bool) -> None:
    assert _looks_like_ours(path)
    assert _path_resolves(path, ROOT / "docs") is resolves
