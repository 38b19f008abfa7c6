"""Child process for the schedules' kill test: open an engine on DATA_DIR (its
stages running on the real clock), make the schedules unless they exist (every
second, catching up all missed times), print ``running`` and let them fire until
the parent SIGKILLs it.

Usage: python -m tests.engine.schedules_child DATA_DIR COUNT"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from delayq import Engine, EngineSettings
from delayq.errors import AlreadyExists
from delayq.recurrence.spec import CatchUp, MessageTemplate, ScheduleSpec

SETTINGS = dict(
    precision_ms=50,
    window_ms=2_000,
    flush_interval_ms=100,
    commitlog_segment_bytes=256 << 10,
    timerlog_segment_bytes=64 << 10,
)
SPEC = ScheduleSpec(MessageTemplate("t", b"tick"), every_ms=1000, catch_up=CatchUp.ALL)


def main() -> None:
    data, count = Path(sys.argv[1]), int(sys.argv[2])
    engine = Engine(EngineSettings(data_dir=data, **SETTINGS)).start()  # type: ignore[arg-type]
    for i in range(count):
        with contextlib.suppress(AlreadyExists):  # made by an earlier child
            engine.create_schedule(f"s{i}", SPEC)
    print("running", flush=True)  # the parent's kill comes at a random moment from now
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
