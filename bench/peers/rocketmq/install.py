"""The RocketMQ peer's files, made on first use and cached outside the repository:

    $DELAYQ_BENCH_CACHE (default ~/.cache/delayq-bench)/rocketmq-<version>/
        lib/*.jar          pom.xml's dependencies (broker, name server, client), from
                           Maven Central by ``mvn dependency:copy-dependencies`` (~95 MB)
        classes/Driver.class   Driver.java, compiled by javac against lib/
        stamp              the hash of pom.xml and Driver.java the cache was made from

A cache whose stamp differs is made again (the jars only when pom.xml changed).
Needs ``mvn`` and a JDK 17 (``javac``); says how to get them when they are missing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
DRIVER = HERE / "Driver.java"


class Peer(NamedTuple):
    """Where the peer's jars and compiled driver are."""

    lib: Path
    classes: Path

    @property
    def classpath(self) -> str:
        return f"{self.lib}/*{os.pathsep}{self.classes}"


def version() -> str:
    """The RocketMQ version pom.xml pins."""
    found = re.search(r"<rocketmq.version>([^<]+)</rocketmq.version>", POM.read_text())
    if found is None:
        raise SystemExit(f"{POM} names no rocketmq.version")
    return found.group(1)


def cache_dir() -> Path:
    root = os.environ.get("DELAYQ_BENCH_CACHE") or Path.home() / ".cache" / "delayq-bench"
    return Path(root) / f"rocketmq-{version()}"


def _digest(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise SystemExit(
            f"the RocketMQ peer needs `{tool}` (Debian: apt-get install -y maven "
            "openjdk-17-jdk-headless)"
        )
    return path


def _run(cmd: list[str], what: str) -> None:
    print(f"rocketmq peer: {what}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"rocketmq peer: {what} failed:\n{(done.stdout + done.stderr)[-3000:]}")


def ensure() -> Peer:
    """The peer's jars and driver, fetched and compiled if the cache lacks them."""
    home = cache_dir()
    peer = Peer(home / "lib", home / "classes")
    stamp = home / "stamp"
    want = f"{_digest(POM)} {_digest(POM, DRIVER)}"
    have = stamp.read_text().split() if stamp.exists() else []
    if not have or have[0] != want.split()[0] or not any(peer.lib.glob("rocketmq-broker-*.jar")):
        shutil.rmtree(peer.lib, ignore_errors=True)
        mvn = _need("mvn")
        _run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(POM),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={peer.lib}",
            ],
            f"fetching RocketMQ {version()} from Maven Central into {peer.lib} (~95 MB, once)",
        )
    if have != want.split() or not (peer.classes / "Driver.class").exists():
        shutil.rmtree(peer.classes, ignore_errors=True)
        peer.classes.mkdir(parents=True)
        _run(
            [_need("javac"), "-cp", f"{peer.lib}/*", "-d", str(peer.classes), str(DRIVER)],
            "compiling Driver.java",
        )
    stamp.write_text(want + "\n")
    return peer


if __name__ == "__main__":
    print(ensure().classpath)
