"""``Bench5.java``, the official RocketMQ 5 Java client (``rocketmq-client-java``, pinned
in pom.xml) as ``bench.compare``'s producer and consumer of the two systems that speak
RocketMQ 5's gRPC protocol: ``delayq_rmq5`` and ``rocketmq5_proxy``.

- ``ensure()``: the client's shaded jar (~27 MB from Maven Central, once) and the
  compiled driver, cached by ``bench.peers.javabuild`` under ``$DELAYQ_BENCH_CACHE``
  (default ~/.cache/delayq-bench) ``/rocketmq5-bench-client-<version>/``.
- ``Bench5``: one driver process against one endpoint (see the top of Bench5.java for
  its commands); ``send``, ``recall`` and ``expect`` answer with its JSON figures.
- ``ClientDriven``: what a system driven that way has (its endpoint, a workdir, the
  driver it started); ``bench.compare`` runs its own workloads through it.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.adapter import TOPIC, die_with_parent
from bench.peers import javabuild
from bench.peers.javabuild import JavaBuild
from bench.peers.rocketmq.system import START_TIMEOUT_S, jvm

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
DRIVER = HERE / "Bench5.java"
GROUP = "bench"
IN_FLIGHT = 100  # sends (and recalls) unanswered at once: bench.compare's batch size
CONSUMERS = 4  # threads, each a receive(32) long poll at a time
REPLY_TIMEOUT_S = 900.0


def version() -> str:
    """The client version pom.xml pins."""
    return javabuild.pom_property(POM, "rocketmq.version")


def ensure() -> JavaBuild:
    """The client's jar and the compiled driver, fetched and compiled when missing."""
    return javabuild.ensure(
        f"rocketmq5-bench-client-{version()}",
        POM,
        [DRIVER],
        expect="rocketmq-client-java-*.jar",
        size="~27 MB",
        maven_args=["-DexcludeTransitive=true"],  # the jar is shaded: it carries its own
    )


class Bench5:
    """One ``Bench5`` process: messages numbered from 0 as sent, at most ``capacity``."""

    def __init__(self, endpoint: str, workdir: Path, capacity: int) -> None:
        build = ensure()
        home = workdir / "bench5"
        home.mkdir(parents=True, exist_ok=True)
        self.log = home / "bench5.log"
        argv = [endpoint, TOPIC, GROUP, str(IN_FLIGHT), str(CONSUMERS), str(capacity)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*jvm(build, home, "512m", f"-Drocketmq.log.root={home}"), "Bench5", *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                preexec_fn=die_with_parent,
            )
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self._reply(START_TIMEOUT_S)  # {"ready": ...}: producer and consumer started

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.replies.put(json.loads(line))
        self.replies.put(None)

    def _reply(self, timeout_s: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        try:
            got = self.replies.get(timeout=timeout_s)
        except queue.Empty:
            raise SystemExit(f"Bench5 silent for {timeout_s:.0f} s; see {self.log}") from None
        if got is None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"Bench5 exited ({self.proc.wait()}); {self.log} ends:\n{tail}")
        return got

    def _ask(self, command: str, numbers: Sequence[int]) -> dict[str, Any]:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(f"{command}\n{' '.join(map(str, numbers))}\n")
        stdin.flush()
        return self._reply()

    def send(self, dues: Sequence[int]) -> dict[str, Any]:
        """One message per due time, ``IN_FLIGHT`` at a time: ``first`` (the first one's
        number), ``secs``, ``failed``, ``resends``, ``ack_ms`` (each send's, to its ack)."""
        return self._ask(f"send {len(dues)}", dues)

    def recall(self, numbers: Sequence[int]) -> dict[str, Any]:
        """Recall these by their handles: ``found``, ``failed``, ``secs``."""
        return self._ask(f"recall {len(numbers)}", numbers)

    def expect(self, numbers: Sequence[int], until_ms: int) -> dict[str, Any]:
        """Wait until these were received (or ``until_ms``): ``lateness`` (ms, each
        received one's), ``lost``, ``first_ms``/``last_ms``, the correctness counts."""
        return self._ask(f"expect {len(numbers)} {until_ms}", numbers)

    def close(self) -> None:
        if self.proc.poll() is None:
            stdin = self.proc.stdin
            assert stdin is not None
            try:
                stdin.write("quit\n")
                stdin.close()
                self.proc.wait(15)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.proc.wait(30)
        self.reader.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


class ClientDriven:
    """A system ``bench.compare`` drives through ``Bench5`` (its own workloads, not the
    adapters' ``schedule``/``poll``): ``open`` sets ``endpoint`` and ``dir``."""

    in_process = False
    endpoint: str
    dir: Path
    client: Bench5 | None = None

    def start_client(self, capacity: int) -> Bench5:
        self.client = Bench5(self.endpoint, self.dir, capacity)
        return self.client

    def close_client(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


if __name__ == "__main__":
    print(ensure().classpath)
