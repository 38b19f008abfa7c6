"""Shared fixtures: small engines on temp dirs with a fake clock, and real ``delayq
serve`` processes (``start_server``, for the cli and integration tests). And the
run's options and plugins: ``--long`` (the long tests at their long size,
``tests/support/sizes.py``), the time per suite (``timing``) and how xdist
workers share the suite (``scheduling``)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from delayq import Engine, FakeClock, idcodec
from delayq.formats import cancel, deliver, message, messagecolumns
from delayq.store import statemap, views
from delayq.timers.memory import lateness
from tests.support.engines import START_MS, small_settings
from tests.support.servers import ServerProcess
from tests.support.sizes import LONG_ENV

pytest_plugins = ["tests.support.timing", "tests.support.scheduling"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="run the tests marked long at their long size (make test-long)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("long"):
        os.environ[LONG_ENV] = "1"


@pytest.fixture(params=["one by one", "vectorised"])
def batch_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test through both paths of the batch helpers that have a scalar one for
    a few items (``batchops.FEW``): each must give exactly what the other gives."""
    few = 1 << 30 if request.param == "one by one" else 0
    scalar_paths = (lateness, message, messagecolumns, cancel, deliver, views, statemap, idcodec)
    for module in scalar_paths:
        monkeypatch.setattr(module, "FEW", few)
    return str(request.param)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START_MS)


@pytest.fixture
def make_engine(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Engine]]:
    """Factory of started, pump-driven engines on one data dir; closes them at the end."""
    made: list[Engine] = []

    def make(**over: Any) -> Engine:
        e = Engine(small_settings(tmp_path / "data", **over), clock, background=False).start()
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


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
