"""SIGKILL the process of an engine while its schedules fire (every second, each
kill at a random moment, so some come in the middle of a firing step), reopen,
and check that every nominal time fired exactly once: one message each, from the
first to the last, none early."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from delayq import Engine, EngineSettings
from tests.engine.schedules_child import SETTINGS
from tests.support.engines import drain
from tests.support.sizes import size

ROOT = Path(__file__).resolve().parents[2]
SCHEDULES = 50


def test_sigkill_while_schedules_fire_fires_each_nominal_time_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    rng = random.Random(int(os.environ.get("DELAYQ_CRASH_SEED", "7")))
    kills = size("DELAYQ_SCHEDULE_KILLS", ci=3, long=20)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for i in range(kills):
        log = tmp_path / f"child{i}.log"  # a file, not a pipe: a chatty child never blocks
        with (
            log.open("wb") as err,
            subprocess.Popen(
                [sys.executable, "-m", "tests.engine.schedules_child", str(data), str(SCHEDULES)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
            ) as child,
        ):
            try:
                assert child.stdout is not None
                assert child.stdout.readline() == b"running\n", log.read_text()
                time.sleep(rng.uniform(0.5, 2.5))
                assert child.poll() is None, log.read_text()
            finally:  # the kill under test; on a failure or an interrupt too
                child.send_signal(signal.SIGKILL)

    engine = Engine(EngineSettings(data_dir=data, **SETTINGS)).start()  # type: ignore[arg-type]
    try:
        schedules = engine.list_schedules(limit=SCHEDULES).schedules
        assert len(schedules) == SCHEDULES
        anchor = {s.name: s.state.anchor_ms for s in schedules}
        time.sleep(2.0)  # its stages fire the missed times (all: the policy) and go on
        got = drain(engine)
        counters = engine.observing.counters
        assert counters["early"] == 0 and counters["schedule_missed"] == 0  # all caught up
    finally:
        engine.close()
    ids: dict[tuple[str, int], set[str]] = {}
    for m in got:
        ids.setdefault((m.key, int(m.headers["delayq-schedule-time"])), set()).add(m.id)
    assert all(len(one) == 1 for one in ids.values()), "a nominal time fired twice"
    for name, start in anchor.items():
        times = sorted(t for n, t in ids if n == name)
        assert times, f"{name} never fired"
        assert times == [start + k * 1000 for k in range(1, len(times) + 1)], name
