"""Java code built against jars from Maven Central, made on first use and cached outside
the repository; one helper for every Java program the benchmarks and the tests drive
(the RocketMQ peer's ``Driver.java``, the RocketMQ 5 client's ``ClientDriver.java``):

    $DELAYQ_BENCH_CACHE (default ~/.cache/delayq-bench)/<name>/
        lib/*.jar      the pom's dependencies, by ``mvn dependency:copy-dependencies``
        classes-<H>/   the sources, compiled by javac against lib/; H hashes the pom
                       and the sources
        stamp          two hashes: of the pom, and of the pom and the sources
        .lock          held while the cache is checked or made

The jars are fetched again when the pom changed. Classes are never replaced in place:
each version of the sources has its own directory, made whole (compiled aside, then
renamed), so a program started from one checkout is not broken mid-run by another
checkout of other sources (a second worktree, another run on the machine) compiling
into the same cache; a directory is a few KB, and older ones are left. Callers in
several processes at once (xdist workers, ``make test``'s background fetch) take
turns on the lock, so the later ones find the work done. Needs ``mvn`` and a JDK 17
(``javac``), which ``make system-deps`` installs; says so when they are missing.
Does I/O: Maven reaches the network.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple


class JavaBuildError(RuntimeError):
    """A tool is missing, or Maven or javac failed (the message carries their output)."""


class JavaBuild(NamedTuple):
    """Where a cached build's jars and classes are."""

    lib: Path
    classes: Path

    @property
    def classpath(self) -> str:
        return f"{self.lib}/*{os.pathsep}{self.classes}"


def cache_root() -> Path:
    return Path(os.environ.get("DELAYQ_BENCH_CACHE") or Path.home() / ".cache" / "delayq-bench")


def pom_property(pom: Path, name: str) -> str:
    """The value of ``<name>`` in the pom's properties (a pinned version)."""
    found = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", pom.read_text())
    if found is None:
        raise JavaBuildError(f"{pom} names no {name}")
    return found.group(1)


def _digest(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise JavaBuildError(
            f"`{tool}` is missing: `make system-deps` installs it (Debian: apt-get install "
            "-y maven openjdk-17-jdk-headless)"
        )
    return path


def _run(cmd: list[str], name: str, what: str) -> None:
    print(f"{name}: {what}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise JavaBuildError(f"{name}: {what} failed:\n{(done.stdout + done.stderr)[-3000:]}")


def ensure(
    name: str,
    pom: Path,
    sources: Sequence[Path],
    *,
    expect: str,
    size: str,
    maven_args: Sequence[str] = (),
) -> JavaBuild:
    """The jars of ``pom`` and the compiled ``sources`` under ``cache_root()/name``,
    fetched and compiled when the cache lacks them or was made from other files.
    ``expect`` is a glob that must match in lib/ (a cache emptied by hand is refetched),
    ``size`` what the fetch downloads (for the message), ``maven_args`` more options
    for ``dependency:copy-dependencies``."""
    home = cache_root() / name
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time; the others wait, then reuse
        return _make(home, name, pom, sources, expect, size, maven_args)


def _make(
    home: Path,
    name: str,
    pom: Path,
    sources: Sequence[Path],
    expect: str,
    size: str,
    maven_args: Sequence[str],
) -> JavaBuild:
    stamp = home / "stamp"
    want = [_digest(pom), _digest(pom, *sources)]
    built = JavaBuild(home / "lib", home / f"classes-{want[1]}")
    have = stamp.read_text().split() if stamp.exists() else []
    if have[:1] != want[:1] or not any(built.lib.glob(expect)):
        shutil.rmtree(built.lib, ignore_errors=True)
        stamp.unlink(missing_ok=True)
        mvn = _need("mvn")
        fetch = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies"]
        _run(
            [*fetch, f"-DoutputDirectory={built.lib}", *maven_args],
            name,
            f"fetching {pom.name}'s jars from Maven Central into {built.lib} ({size}, once)",
        )
    classes = [s.with_suffix(".class").name for s in sources]
    if have[:1] != want[:1] or not all((built.classes / c).exists() for c in classes):
        aside = home / f".{built.classes.name}.part"
        shutil.rmtree(aside, ignore_errors=True)
        aside.mkdir(parents=True)
        javac = [_need("javac"), "--release", "17", "-cp", f"{built.lib}/*"]
        _run(
            [*javac, "-d", str(aside), *map(str, sources)],
            name,
            f"compiling {', '.join(s.name for s in sources)}",
        )
        shutil.rmtree(built.classes, ignore_errors=True)  # (an incomplete one)
        aside.rename(built.classes)
    stamp.write_text(" ".join(want) + "\n")
    return built
