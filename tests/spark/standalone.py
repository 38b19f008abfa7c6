"""``StandaloneSpark``: a real Spark standalone cluster on loopback, a master and
one worker process started with pyspark's own ``bin/spark-class`` (the pip package
ships no sbin scripts), for tests that run a job on a cluster instead of in local
mode.

    with StandaloneSpark(tmp_path / "spark") as cluster:
        run the job with --master cluster.master_url
        cluster.apps()            # names of the applications that ran or run on it

Both run in a session of their own; leaving the block kills the whole group.
Their logs are under DIR (shown when the cluster does not come up).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

from tests.support.cluster import free_base_port

__all__ = ["StandaloneSpark"]

SPARK_HOME = Path(pyspark.__file__).parent


class StandaloneSpark:
    def __init__(self, dir: Path, cores: int = 2, memory: str = "2g") -> None:
        self.dir = dir
        base = free_base_port(3)
        self.port, self.webui, self.worker_webui = base, base + 1, base + 2
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self._cores, self._memory = cores, memory
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> StandaloneSpark:
        self.dir.mkdir(parents=True, exist_ok=True)
        env = dict(
            os.environ,
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_WORKER_DIR=str(self.dir / "work"),
            PYSPARK_PYTHON=sys.executable,
            # the master and the worker only book-keep: a small heap, the JIT's
            # first tier and the serial collector start them quicker on 2 cores
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        )
        try:
            self._start("master", env, "org.apache.spark.deploy.master.Master",
                        "--host", "127.0.0.1", "--port", str(self.port),
                        "--webui-port", str(self.webui))  # fmt: skip
            self._start("worker", env, "org.apache.spark.deploy.worker.Worker",
                        "--host", "127.0.0.1", "-c", str(self._cores), "-m", self._memory,
                        "--webui-port", str(self.worker_webui), self.master_url)  # fmt: skip
            self._wait_worker(timeout_s=90)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
        self._procs.clear()

    def _start(self, name: str, env: dict[str, str], cls: str, *args: str) -> None:
        with open(self.dir / f"{name}.log", "wb") as log:
            self._procs.append(
                subprocess.Popen(
                    [str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )

    def state(self) -> dict[str, Any]:
        """The master's status page as JSON (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=5) as r:
            doc: dict[str, Any] = json.load(r)
        return doc

    def apps(self) -> list[str]:
        """The names of the applications that ran on it or still run (a job may
        say it is done while its application is still stopping)."""
        doc = self.state()
        return [a["name"] for kind in ("activeapps", "completedapps") for a in doc.get(kind, [])]

    def _wait_worker(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for p in self._procs:
                if p.poll() is not None:
                    raise AssertionError(f"a Spark process exited: {self._logs()}")
            try:
                if any(w.get("state") == "ALIVE" for w in self.state().get("workers", [])):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"no Spark worker registered in {timeout_s} s: {self._logs()}")

    def _logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted(self.dir.glob("*.log"))
        )
