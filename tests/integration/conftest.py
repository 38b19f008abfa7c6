"""Fixtures for tests against real ``delayq serve`` processes."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import ServerProcess


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[type[ServerProcess] | object]:
    started: list[ServerProcess] = []

    def start(*args: str, data_dir: Path | None = None) -> ServerProcess:
        srv = ServerProcess(data_dir or tmp_path / "data", list(args)).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:  # also those a test stopped or killed: stop() closes their pipes
        if srv.proc is not None:
            srv.stop(signal.SIGKILL)
