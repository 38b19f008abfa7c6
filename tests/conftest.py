"""Shared fixtures: small engines on temp dirs with a fake clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from delayq import Engine, EngineSettings, FakeClock, tokens
from delayq.engine import lateness
from delayq.formats import cancel, deliver, message
from delayq.store import segments, statemap

START_MS = 1_700_000_000_000


def small_settings(data_dir: Path, **over: Any) -> EngineSettings:
    """Small windows and segments so rolling and segment rotation happen in tests."""
    base: dict[str, Any] = dict(
        data_dir=data_dir,
        precision_ms=100,
        window_ms=10_000,
        commitlog_segment_bytes=64 << 10,
        timerlog_segment_bytes=16 << 10,
        flush_interval_ms=200,
    )
    base.update(over)
    return EngineSettings(**base)


@pytest.fixture(params=["one by one", "vectorised"])
def batch_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test through both paths of the batch helpers that have a scalar one for
    a few items (``pieces.FEW``): each must give exactly what the other gives."""
    few = 1 << 30 if request.param == "one by one" else 0
    for module in (lateness, message, cancel, deliver, segments, statemap, tokens):
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
