"""The official RocketMQ 5 Java client (``rocketmq-client-java``, pinned in
``java/pom.xml``) driven through ``java/ClientDriver.java`` as a subprocess; run
``java ClientDriver --help``, or see the top of ClientDriver.java, for its scenarios.

- ``ensure()``: the client's jar (one shaded jar from Maven Central, ~27 MB, once) and
  the compiled driver, cached under ``$DELAYQ_BENCH_CACHE`` (default
  ~/.cache/delayq-bench) ``/rocketmq-client-java-<version>/`` by
  ``bench.peers.javabuild``. ``python -m tests.rocketmq.javaclient`` makes it (``make
  rocketmq-java-client``; ``make test`` runs that in the background and the tests'
  fixture waits on the cache's lock).
- ``Drivers(endpoint, log_dir)``: ``start()`` a scenario in the background (a consumer
  that must be up before anything is sent), ``run()`` one to its end. Both give the
  driver's events, one dict per JSON line, and raise ``DriverFailed`` (its stderr's
  tail, its events) when it exits non-zero or outlives its deadline; a started one's
  ``wait_for``/``wait_until`` wait on what it has printed so far. ``launch`` turns the
  java command line into the one started (the Kubernetes tests run the driver as a
  client inside their cluster: ``LocalKubelet.in_cluster_command``).
- ``of(events, name)``, ``sent_by_id(events)``: a run's events of one kind; its
  acknowledged sends by message id.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from bench.peers import javabuild
from bench.peers.javabuild import JavaBuild

HERE = Path(__file__).resolve().parent / "java"
POM = HERE / "pom.xml"
DRIVER = HERE / "ClientDriver.java"
GRACE_S = 30.0
"""How long past its own deadline a driver may take before it is killed: the JVM's
start, the client's shutdown and the driver's watchdog (a long poll, a request timeout
and 5 s: 13 s with the defaults) fit in it."""

Event = dict[str, Any]
T = TypeVar("T")


def of(events: list[Event], name: str) -> list[Event]:
    """The ``name`` events of ``events``."""
    return [e for e in events if e["event"] == name]


def sent_by_id(events: list[Event]) -> dict[str, Event]:
    """The 'sent' events (acknowledged sends) by the client's message id."""
    return {e["message_id"]: e for e in of(events, "sent")}


class DriverFailed(AssertionError):
    """A scenario exited non-zero (or was killed at its deadline); ``events`` holds what
    it printed until then."""

    def __init__(self, message: str, returncode: int | None, events: list[Event]) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.events = events


def version() -> str:
    """The client version java/pom.xml pins."""
    return javabuild.pom_property(POM, "rocketmq.version")


def ensure() -> JavaBuild:
    """The client's jar and the compiled driver, fetched and compiled when missing."""
    return javabuild.ensure(
        f"rocketmq-client-java-{version()}",
        POM,
        [DRIVER],
        expect="rocketmq-client-java-*.jar",
        size="~27 MB",
        maven_args=["-DexcludeTransitive=true"],  # the jar is shaded: it carries its own
    )


def command(build: JavaBuild, log_dir: Path, *args: str) -> list[str]:
    """The java command line of ``ClientDriver ARGS``, the client's log file in log_dir."""
    return [
        "java",
        "-XX:+UseSerialGC",  # a small client: the JVM's cheapest start, two cores shared
        "-Xmx256m",
        f"-Drocketmq.log.root={log_dir}",  # else ~/logs/rocketmq
        "-cp",
        build.classpath,
        "ClientDriver",
        *args,
    ]


@dataclass
class Running:
    """One driver process; its stdout is read by a thread into ``events``."""

    scenario: str
    proc: subprocess.Popen[str]
    stderr_path: Path
    log_dir: Path
    timeout_s: float
    events: list[Event] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # stdout lines that are not JSON
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _reader: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._began = time.monotonic()
        self._reader = threading.Thread(target=self._read, name=f"driver-{self.scenario}")
        self._reader.daemon = True
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                try:
                    self.events.append(json.loads(line))
                except ValueError:
                    self.other.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, event: str, timeout_s: float = 60.0) -> Event:
        """The first ``event`` printed; raises if the driver ends or the time passes first."""

        def first(events: list[Event]) -> Event | None:
            return next((e for e in events if e["event"] == event), None)

        return self.wait_until(first, f"no {event!r} event", timeout_s)

    def wait_until(
        self, found: Callable[[list[Event]], T | None], what: str, timeout_s: float = 60.0
    ) -> T:
        """What ``found`` makes of the events printed so far, once it is not None
        (asked again at each new line); raises, saying it printed ``what``, if the
        driver ends or the time passes first."""
        end = time.monotonic() + timeout_s
        with self._changed:
            while True:
                got = found(self.events)
                if got is not None:
                    return got
                left = end - time.monotonic()
                if left <= 0 or not self._reader_alive():  # (stdout closed: the driver ended)
                    break
                self._changed.wait(min(left, 0.5))
        if not self._reader_alive():
            self.result()  # raises with the driver's own account when it failed
        raise DriverFailed(
            self._account(f"printed {what} in {timeout_s:.0f} s"),
            self.proc.poll(),
            self.events,
        )

    def result(self) -> list[Event]:
        """Every event, once the driver has exited 0; raises otherwise."""
        try:
            self.proc.wait(timeout=max(0.0, self.timeout_s - (time.monotonic() - self._began)))
        except subprocess.TimeoutExpired:
            self.close()
            raise DriverFailed(
                self._account(f"was still running after {self.timeout_s:.0f} s: killed"),
                None,
                self.events,
            ) from None
        self.close()
        if self.proc.returncode != 0:
            raise DriverFailed(
                self._account(f"exited {self.proc.returncode}"), self.proc.returncode, self.events
            )
        return self.events

    def close(self) -> None:
        """Kill the driver if it still runs, and release its pipe."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self._reader is not None:
            self._reader.join()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def _reader_alive(self) -> bool:
        return self._reader is not None and self._reader.is_alive()

    def _account(self, what: str) -> str:
        errors = [str(e.get("message")) for e in self.events if e.get("event") == "error"]
        tail = self.stderr_path.read_text(errors="replace")[-3000:]
        return (
            f"ClientDriver {self.scenario} {what}"
            + (f": {errors[-1]}" if errors else "")
            + f"\n--- its stderr ({self.stderr_path}), last lines:\n{tail}"
            + f"\n--- the client's log: {self.log_dir / 'rocketmq-client.log'}"
        )


@dataclass
class ScenarioDrivers:
    """Runs a client driver's scenarios against one endpoint, their logs in
    ``log_dir``; ``close`` kills the ones still running. Not thread-safe. A client's
    drivers say how a scenario's argv is started (``command``) and in what
    environment (``env``)."""

    endpoint: str
    log_dir: Path
    started: list[Running] = field(default_factory=list, kw_only=True)
    DEADLINE_S: ClassVar[float] = 60.0
    """A scenario's deadline when the caller names none."""
    KIND: ClassVar[str] = ""
    """Its logs' name prefix."""

    def command(self, argv: list[str]) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        return None

    def running(self, *args: Any) -> Running:
        return Running(*args)

    def start(
        self, scenario: str, topic: str, *args: str, deadline_s: float | None = None
    ) -> Running:
        """``DRIVER SCENARIO --endpoint ENDPOINT --topic TOPIC ARGS`` started, ending by
        itself after ``deadline_s`` (exit 3), killed ``GRACE_S`` later if it has not."""
        deadline_s = self.DEADLINE_S if deadline_s is None else deadline_s
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stderr_path = self.log_dir / f"{self.KIND}{scenario}-{time.monotonic_ns()}.stderr"
        argv = [scenario, "--endpoint", self.endpoint, "--topic", topic]
        argv += ["--deadline-ms", str(int(deadline_s * 1000)), *args]
        with open(stderr_path, "w") as stderr:  # the child writes to its own copy
            proc = subprocess.Popen(
                self.command(argv),
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                env=self.env(),
            )
        self.started.append(
            self.running(scenario, proc, stderr_path, self.log_dir, deadline_s + GRACE_S)
        )
        return self.started[-1]

    def run(
        self, scenario: str, topic: str, *args: str, deadline_s: float | None = None
    ) -> list[Event]:
        """A scenario run to its end: its events; ``DriverFailed`` when it fails."""
        return self.start(scenario, topic, *args, deadline_s=deadline_s).result()

    def close(self) -> None:
        for running in self.started:
            running.close()


@dataclass
class Drivers(ScenarioDrivers):
    """The Java client's drivers (``ClientDriver``)."""

    build: JavaBuild = field(default_factory=ensure)
    launch: Callable[[list[str]], list[str]] = list
    """The command line started for a java command line (default: that one)."""

    def command(self, argv: list[str]) -> list[str]:
        return self.launch(command(self.build, self.log_dir, *argv))


if __name__ == "__main__":
    print(ensure().classpath)
