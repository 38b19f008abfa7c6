"""Helpers for tests of an engine on a temp dir with a fake clock: small settings,
requests, and driving an engine by hand (``background=False``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from delayq import Engine, EngineSettings, FakeClock
from delayq.engine import ReceivedMessage, ScheduleOutcome, ScheduleRequest

START_MS = 1_700_000_000_000

Make = Callable[..., Engine]
"""The ``make_engine`` fixture's type (``tests/conftest.py``)."""


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


def req(delay_ms: int, body: bytes = b"x", topic: str = "t", **kw: object) -> ScheduleRequest:
    return ScheduleRequest(topic=topic, body=body, delay_ms=delay_ms, **kw)  # type: ignore[arg-type]


def run_until(engine: Engine, clock: FakeClock, until_ms: int, step_ms: int = 7) -> None:
    while clock.now_ms() < until_ms:
        clock.advance(min(step_ms, until_ms - clock.now_ms()))
        engine.pump()


def drain(engine: Engine, topic: str = "t", group: str = "g") -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    while batch := engine.receive(topic, group, max_messages=1000):
        got += batch
        engine.ack(topic, group, [m.receipt for m in batch])
    return got


def ids(outcomes: list[ScheduleOutcome]) -> list[str]:
    out = []
    for o in outcomes:
        assert o.error is None and o.id is not None
        out.append(o.id)
    return out


SMALL = {"commitlog_segment_bytes": 8 << 10, "timerlog_segment_bytes": 2 << 10}
"""Segments small enough that a few seconds of ``churn`` fill and retire several."""


def churn(e: Engine, clock: FakeClock, seconds: int) -> None:
    """Traffic due at once, delivered and checkpointed each second: segments fill,
    retention deletes them."""
    for _ in range(seconds):
        ids(e.schedule([req(50, b"y" * 300) for _ in range(5)]))
        run_until(e, clock, clock.now_ms() + 1000, step_ms=100)
        drain(e)
        e.checkpoint()
