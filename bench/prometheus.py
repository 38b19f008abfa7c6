"""A real Prometheus (Debian's ``prometheus`` binary, ``make system-deps``) as a
plain process on a free loopback port, scraping ``file_sd`` targets and
evaluating rule files every ``scrape_s`` (1 s by default), for the tests that
need its answers (``tests/ops``) and the benchmarks that measure what a scrape
costs (``bench.scrape``):

    with PrometheusProcess(tmp_path / "prom", targets=c.dir / "prometheus-targets.json",
                           rules=[rules_file]) as prom:
        prom.wait_targets_up(6)
        prom.query('sum by (shard) (delayq_delivering)')   # the result vector
        prom.alerts()                                      # ALERTS, as (name, state, labels)

Its first scrape comes ~5 s after the start (this version reads ``file_sd`` files
on a 5 s refresh; no flag shortens it): ``wait_targets_up`` polls the targets API,
no test sleeps. Missing binary: an AssertionError naming ``make system-deps``
(a suite never skips for a missing binary)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.systems import free_port

__all__ = ["PrometheusProcess", "binary"]


def binary() -> str:
    path = shutil.which("prometheus")
    assert path, "prometheus is missing: run `make system-deps` (Debian's prometheus package)"
    return path


class PrometheusProcess:
    def __init__(
        self, dir: Path, *, targets: Path, rules: Sequence[Path] = (), scrape_s: float = 1
    ) -> None:
        self.dir = dir
        self.targets = targets
        self.rules = list(rules)
        self.scrape_s = scrape_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> PrometheusProcess:
        self.dir.mkdir(parents=True, exist_ok=True)
        every = f"{round(self.scrape_s * 1000)}ms"
        config = {
            "global": {
                "scrape_interval": every,
                "scrape_timeout": every,
                "evaluation_interval": every,
            },
            "rule_files": [str(r) for r in self.rules],
            "scrape_configs": [
                {"job_name": "delayq", "file_sd_configs": [{"files": [str(self.targets)]}]}
            ],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            [
                binary(),
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"prometheus not ready:\n{self.log()}"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> PrometheusProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        path = self.dir / "prometheus.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        """``/api/v1/<path>``'s ``data``; AssertionError with Prometheus' error."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                doc = json.load(r)
        except urllib.error.HTTPError as exc:
            doc = json.load(exc)
        assert doc.get("status") == "success", f"{path} {params}: {doc}"
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (a vector: ``metric`` labels and ``value``)."""
        data = self.api("query", query=expr)
        assert data["resultType"] in ("vector", "scalar"), data
        return data["result"] if data["resultType"] == "vector" else [{"value": data["result"]}]

    def targets_up(self) -> int:
        active = self.api("targets", state="active")["activeTargets"]
        return sum(1 for t in active if t["health"] == "up")

    def wait_targets_up(self, n: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while self.targets_up() < n:
            assert time.monotonic() < deadline, (
                f"{self.targets_up()} of {n} targets up: "
                f"{self.api('targets', state='active')}\n{self.log()}"
            )
            time.sleep(0.2)

    def scrapes(self) -> int:
        """Scrapes of every target in the last hour (one ``up`` sample each)."""
        got = self.query('sum(count_over_time(up{job="delayq"}[1h]))')
        return int(float(got[0]["value"][1])) if got else 0

    def alerts(self) -> list[tuple[str, str, dict[str, str]]]:
        """Active alerts as (name, state pending|firing, labels)."""
        return [
            (a["labels"]["alertname"], a["state"], a["labels"])
            for a in self.api("alerts")["alerts"]
        ]

    def wait(self, what: str, check: Any, timeout_s: float = 60, every_s: float = 0.25) -> Any:
        """Poll ``check()`` until it returns something truthy; that value. On timeout
        an AssertionError saying ``what`` was awaited, with the active alerts."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = check()
            if got:
                return got
            assert time.monotonic() < deadline, f"waited {timeout_s}s for {what}: {self.alerts()}"
            time.sleep(every_s)
