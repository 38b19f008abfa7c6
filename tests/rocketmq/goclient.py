"""The official RocketMQ 5 Go client (``github.com/apache/rocketmq-clients/golang/v5``,
pinned in ``go/go.mod``, checksums in ``go/go.sum``) driven through ``go/main.go`` as a
subprocess; run ``clientdriver --help``, or see the top of main.go, for its scenarios.

- ``ensure()``: the driver built by ``go build`` into ``$DELAYQ_ROCKETMQ_GO_CACHE``
  (default ~/.cache/delayq-rocketmq-go) ``/bin/<client version>-<hash of go/>/``, with
  the Go module and build caches beside it (``mod/``, ``build/``), so a rebuild after a
  change of the sources is warm. Modules come from the Go module proxy only
  (``GOPROXY`` as set, ``GOTOOLCHAIN=local``: the machine's Go, never a download of
  another). One builder at a time (a lock file); a cold build takes a few minutes here
  (~80 MB of modules, then grpc and protobuf compiled), a warm one nothing.
  ``python -m tests.rocketmq.goclient`` builds it (``make rocketmq-go-client``; ``make
  test`` runs that in the background and the tests wait on the lock).
- ``Drivers(endpoint, log_dir)``: ``start()`` a scenario in the background, ``run()``
  one to its end, as ``javaclient.Drivers`` does, with its ``Running`` (events, one
  dict per JSON line; ``DriverFailed`` when the driver exits non-zero or outlives its
  deadline).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tests.rocketmq import javaclient
from tests.rocketmq.javaclient import Event

HERE = Path(__file__).resolve().parent / "go"
SOURCES = ("go.mod", "go.sum", "main.go")
MODULE = "github.com/apache/rocketmq-clients/golang/v5"
BUILD_TIMEOUT_S = 1800.0  # cold: ~3-5 min here on two busy cores; generous for a slow proxy
GRACE_S = 15.0
"""How long past its own deadline (its watchdog exits 3) a driver may take before it is
killed."""
LOG_NAME = "rocketmq-client.log"  # the name javaclient.Running's failure message shows

__all__ = ["DriverFailed", "Drivers", "Event", "GoBuildError", "ensure", "version"]

DriverFailed = javaclient.DriverFailed


class GoBuildError(RuntimeError):
    """``go`` is missing, or ``go build`` failed (the message carries its output)."""


def cache_root() -> Path:
    return Path(
        os.environ.get("DELAYQ_ROCKETMQ_GO_CACHE") or Path.home() / ".cache/delayq-rocketmq-go"
    )


def version() -> str:
    """The client version go/go.mod requires."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(MODULE)}\s+(v\S+)", _read("go.mod"), re.M)
    if found is None:
        raise GoBuildError(f"{HERE / 'go.mod'} requires no {MODULE}")
    return found.group(1)


def _read(name: str) -> str:
    return (HERE / name).read_text()


def binary_path() -> Path:
    """Where the driver built from the current sources is (or will be)."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    return cache_root() / "bin" / f"{version()}-{h.hexdigest()[:16]}" / "clientdriver"


def go_env() -> dict[str, str]:
    """The environment of ``go build``: the caches under ``cache_root()``, modules as
    go.mod and go.sum say (the proxy only), the machine's own toolchain."""
    root = cache_root()
    return dict(
        os.environ,
        GOMODCACHE=str(root / "mod"),
        GOCACHE=str(root / "build"),
        GOFLAGS="-mod=mod -modcacherw -buildvcs=false",  # -modcacherw: rm -rf can clean it
        GOTOOLCHAIN="local",
        GOWORK="off",
    )


def _go() -> str:
    found = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.access(found, os.X_OK):
        raise GoBuildError("`go` is missing: install Go 1.25 or newer (it is on PATH here)")
    return found


def ensure() -> Path:
    """The driver's binary, built first when the cache lacks one for these sources."""
    binary = binary_path()
    if binary.exists():  # the common case, without taking the lock
        return binary
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others wait, then reuse
        if not binary.exists():
            _build(binary)
    return binary


def _build(binary: Path) -> None:
    binary.parent.mkdir(parents=True, exist_ok=True)
    part = binary.with_name(binary.name + ".part")
    cmd = [_go(), "build", "-trimpath", "-o", str(part), "."]
    print(f"building the RocketMQ Go client driver ({version()}): {binary}", file=sys.stderr)
    began = time.monotonic()
    try:
        done = subprocess.run(
            cmd, cwd=HERE, env=go_env(), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        raise GoBuildError(f"`{' '.join(cmd)}` took over {BUILD_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        raise GoBuildError(
            f"`{' '.join(cmd)}` in {HERE} failed (exit {done.returncode}):\n"
            + (done.stdout + done.stderr)[-3000:]
        )
    os.replace(part, binary)  # whole or absent
    print(f"built in {time.monotonic() - began:.0f} s", file=sys.stderr)


class Running(javaclient.Running):
    """One Go driver process (``javaclient.Running``: events read by a thread)."""

    def _account(self, what: str) -> str:
        return "the Go " + super()._account(what)


@dataclass
class Drivers(javaclient.ScenarioDrivers):
    """The Go client's drivers (``go/main.go`` built by ``ensure``)."""

    binary: Path = field(default_factory=ensure)
    DEADLINE_S: ClassVar[float] = 30.0
    KIND: ClassVar[str] = "go-"

    def command(self, argv: list[str]) -> list[str]:
        return [str(self.binary), argv[0], "--log-dir", str(self.log_dir), *argv[1:]]

    def env(self) -> dict[str, str]:
        return dict(os.environ, **{"rocketmq.client.logFileName": LOG_NAME})

    def running(self, *args: Any) -> Running:
        return Running(*args)


if __name__ == "__main__":  # make rocketmq-go-client: build it ahead of a run
    began = time.monotonic()
    print(f"{ensure()} ({time.monotonic() - began:.0f} s)")
