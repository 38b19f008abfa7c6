"""The official RocketMQ 5 Python client (``rocketmq-python-client``) as a
subprocess, for the tests of delayq's RocketMQ port.

The client runs in a venv of its own, never in the test process: it ships its own
generated ``apache.rocketmq.v2`` modules, which would clash with delayq's in one
protobuf descriptor pool, and its protobuf needs are its own. The venv is made on
first use from the exact pins of ``python/requirements.txt`` (``ensure_venv``), in
``$DELAYQ_ROCKETMQ_PYTHON_CACHE`` (default ``~/.cache/delayq-rocketmq-python``)
under ``<client version>-<hash of the pins and the interpreter>``, and stamped
when whole, so it is rebuilt only when the pins change. A failed build is an
error, never a skip. Making it takes ~45 s from an empty pip cache (PyPI), a few
seconds from a warm one; ``make rocketmq-python-client`` makes it ahead of a run.

``run`` (or ``start`` then ``.result()``, to run scenarios side by side) runs
``python/client_driver.py`` with one of its commands and returns its JSON lines;
a failure raises ``DriverFailed`` with the driver's stderr and the client's log
tail. This module does I/O: processes, the cache directory, a lock file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "python" / "requirements.txt"
DRIVER = HERE / "python" / "client_driver.py"
CACHE = Path(
    os.environ.get("DELAYQ_ROCKETMQ_PYTHON_CACHE", Path.home() / ".cache/delayq-rocketmq-python")
)
STAMP = ".installed"
EXIT_FAILED = 1  # the driver's exit statuses (client_driver.py)
EXIT_TIMEOUT = 124
BUILD_TIMEOUT_S = 900.0  # pip from PyPI: ~45 s here; generous for a slow mirror
KILL_GRACE_S = 10.0  # past the driver's own --timeout, the test kills it
TAIL_LINES = 40


class DriverFailed(AssertionError):
    """The driver exited non-zero (or was killed), or printed something not JSON."""


class VenvBuildFailed(RuntimeError):
    """Making the client's venv failed: the message has the step and its output."""


def client_version(requirements: Path = REQUIREMENTS) -> str:
    for line in requirements.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and name.strip().lower() == "rocketmq-python-client":
            return version.strip()
    raise VenvBuildFailed(f"{requirements} pins no rocketmq-python-client==VERSION")


def venv_dir(python: str = sys.executable, requirements: Path = REQUIREMENTS) -> Path:
    """Where the venv for these pins and this interpreter lives."""
    digest = hashlib.sha256(requirements.read_bytes())
    digest.update(_interpreter_version(python).encode())
    return CACHE / f"{client_version(requirements)}-{digest.hexdigest()[:12]}"


def _interpreter_version(python: str) -> str:
    if python == sys.executable:
        return sys.version
    out = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def ensure_venv(python: str = sys.executable, requirements: Path = REQUIREMENTS) -> Path:
    """The python of the client's venv, made first if its stamp is missing.

    One process builds while the others (xdist workers, other checkouts) wait on a
    lock file beside it; a venv without its stamp (a build that died) is removed
    and made again. The stamp is written last, after ``pip check`` and an import.
    """
    where = venv_dir(python, requirements)
    venv_python = where / "bin" / "python"
    if (where / STAMP).exists():  # the common case, without taking the lock
        return venv_python
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(where.with_name(where.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until the build is whole
        if not (where / STAMP).exists():
            _build(where, python, requirements)
    return venv_python


def _build(where: Path, python: str, requirements: Path) -> None:
    shutil.rmtree(where, ignore_errors=True)
    log = where.with_name(where.name + ".build.log")
    venv_python = str(where / "bin" / "python")
    began = time.monotonic()
    steps = [
        [python, "-m", "venv", str(where)],
        # --no-deps: the pins are the whole closure; pip check then proves it
        [
            venv_python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "-r",
            str(requirements),
        ],
        [venv_python, "-m", "pip", "check", "--disable-pip-version-check"],
        [venv_python, "-c", "import rocketmq, grpc, google.protobuf"],
    ]
    with open(log, "w") as out:
        for step in steps:
            out.write(f"$ {' '.join(step)}\n")
            out.flush()
            try:
                rc = subprocess.run(
                    step, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S
                ).returncode
            except subprocess.TimeoutExpired:
                rc = -1
            if rc != 0:
                out.close()
                raise VenvBuildFailed(
                    f"making the RocketMQ Python client's venv failed at "
                    f"`{' '.join(step)}` (exit {rc}); {log}:\n{_tail(log.read_text())}"
                )
    took = time.monotonic() - began
    (where / STAMP).write_text(f"{requirements.read_text()}# built in {took:.0f} s\n")


@dataclass(frozen=True)
class DriverResult:
    args: list[str]
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str
    client_log: str

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]

    def one(self, name: str) -> dict[str, Any]:
        found = self.events(name)
        if len(found) != 1:
            raise DriverFailed(f"expected one {name!r} line, got {len(found)}:\n{self.report()}")
        return found[0]

    def report(self) -> str:
        stdout = "\n".join(json.dumps(line) for line in self.lines)
        return (
            f"client_driver.py {' '.join(self.args)}\nexit {self.returncode}\n"
            f"-- stdout:\n{_tail(stdout)}\n-- stderr:\n{_tail(self.stderr)}\n"
            f"-- client log:\n{_tail(self.client_log)}"
        )


class RunningDriver:
    """A driver started by ``start``: ``result`` waits for it. Use it in a
    ``with`` block when a test may fail before it asks for the result: leaving
    the block ends a driver still running. Not thread-safe."""

    def __init__(self, args: list[str], timeout_s: float, request_timeout_s: int) -> None:
        self.args = args
        self._result: DriverResult | None = None
        self._logs = tempfile.TemporaryDirectory(prefix="delayq-rmqpy-")
        # a file, not a pipe: nothing has to drain it while stdout is read; closed by _reap()
        self._stderr = open(Path(self._logs.name) / "stderr", "w+")  # noqa: SIM115
        self._deadline = time.monotonic() + timeout_s + KILL_GRACE_S
        cmd = [str(ensure_venv()), str(DRIVER), "--timeout", str(timeout_s)]
        cmd += ["--request-timeout", str(request_timeout_s), "--client-log-dir", self._logs.name]
        cmd += args
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                stdin=subprocess.DEVNULL,
                text=True,
            )
        except BaseException:
            self._stderr.close()
            self._logs.cleanup()
            raise

    def __enter__(self) -> RunningDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._result is None:
            self._proc.kill()
            self._reap()

    def result(self, check: bool = True) -> DriverResult:
        """Its JSON lines once it ended; with ``check``, ``DriverFailed`` unless it
        exited 0. Printing anything but JSON on stdout always fails."""
        result = self._reap()
        if any(line.get("event") == "not JSON" for line in result.lines):
            raise DriverFailed(f"the driver printed lines that are not JSON:\n{result.report()}")
        if check and result.returncode != 0:
            raise DriverFailed(f"the RocketMQ Python client failed:\n{result.report()}")
        return result

    def _reap(self) -> DriverResult:
        if self._result is not None:
            return self._result
        killed = ""
        try:
            out, _ = self._proc.communicate(timeout=max(0.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # its watchdog failed: never hang a test
            self._proc.kill()
            out, _ = self._proc.communicate()
            killed = "\nclient_driver.py outlived its --timeout and was killed"
        try:
            self._stderr.seek(0)
            stderr = self._stderr.read() + killed
            log = Path(self._logs.name, "logs", "rocketmq_python", "rocketmq_client.log")
            client_log = log.read_text(errors="replace") if log.exists() else ""
        finally:
            self._stderr.close()
            self._logs.cleanup()
        code = self._proc.returncode if not killed else -9
        self._result = DriverResult(self.args, code, _parse(out), stderr, client_log)
        return self._result


def start(
    command: str,
    *args: str,
    endpoint: str,
    timeout_s: float = 60.0,
    request_timeout_s: int = 3,
) -> RunningDriver:
    """Start ``client_driver.py --endpoint ENDPOINT COMMAND ARGS...`` with a hard
    limit of ``timeout_s`` (the driver's own ``--timeout``; killed 10 s later) and
    the client's per-request timeout (whole s, the client's default 3)."""
    return RunningDriver(["--endpoint", endpoint, command, *args], timeout_s, request_timeout_s)


def run(
    command: str,
    *args: str,
    endpoint: str,
    timeout_s: float = 60.0,
    request_timeout_s: int = 3,
    check: bool = True,
) -> DriverResult:
    """``start`` and wait; with ``check``, a non-zero exit raises ``DriverFailed``."""
    with start(
        command, *args, endpoint=endpoint, timeout_s=timeout_s, request_timeout_s=request_timeout_s
    ) as running:
        return running.result(check)


def _parse(out: str) -> list[dict[str, Any]]:
    """The driver's stdout as objects; a line that is not a JSON object becomes
    ``{"event": "not JSON", "line": ...}`` (``result`` refuses those)."""
    lines: list[dict[str, Any]] = []
    for text in out.splitlines():
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        lines.append(value if isinstance(value, dict) else {"event": "not JSON", "line": text})
    return lines


def _tail(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-n:])


if __name__ == "__main__":  # make rocketmq-python-client: make the venv ahead of a run
    began = time.monotonic()
    print(f"{ensure_venv()} ({time.monotonic() - began:.0f} s)")
