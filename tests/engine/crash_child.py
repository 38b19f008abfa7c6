"""Child process for the crash test: load an engine and journal every acknowledged
outcome, until the parent SIGKILLs it.

Journal lines (written only after the call returned, so each is acknowledged; each
ends with " ." so that a line a kill tore is told from a whole one):
``S id due`` scheduled, ``C id`` cancelled, ``X old new due`` rescheduled,
``R id deliver_at delivered`` received, ``A id`` acked. Before a cancel or a
reschedule the child writes its intent (``c id`` / ``x id``): a kill between the
call and its journal line leaves that message's fate open, and the check must
not count it as lost.
Usage: python -m tests.engine.crash_child DATA_DIR JOURNAL SEED (it prints
``running`` once its engine has started).

A retention profile (not in CI: a message left in a ready queue past a few
seconds' retention would expire and count as lost) runs retention and state
chunk retirement under the kills: ``DELAYQ_CRASH_RETENTION_MS=4000
DELAYQ_CRASH_CHUNK_BITS=6``, read by the child and the check alike.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

from delayq import Engine, EngineSettings
from delayq.engine import CancelOutcome, ScheduleRequest
from delayq.store import statemap

SETTINGS = dict(
    precision_ms=50,
    window_ms=2_000,
    flush_interval_ms=100,
    commitlog_segment_bytes=256 << 10,
    timerlog_segment_bytes=64 << 10,
)
if "DELAYQ_CRASH_RETENTION_MS" in os.environ:
    SETTINGS["retention_ms"] = int(os.environ["DELAYQ_CRASH_RETENTION_MS"])
statemap.CHUNK_BITS = int(os.environ.get("DELAYQ_CRASH_CHUNK_BITS", statemap.CHUNK_BITS))


def main() -> None:
    data, journal_path, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    engine = Engine(EngineSettings(data_dir=data, **SETTINGS)).start()  # type: ignore[arg-type]
    journal = os.open(journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(journal, b"\n")  # ends a line the last kill tore, so it cannot merge with ours
    print("running", flush=True)  # the parent's kill comes at a random moment from now
    pending: list[str] = []
    n = 0
    while True:
        reqs = []
        for _ in range(rng.randint(1, 40)):
            n += 1
            delay = rng.choice([rng.randint(0, 1500), rng.randint(2000, 5000)])
            reqs.append(ScheduleRequest(topic="t", body=f"{seed}-{n}".encode(), delay_ms=delay))
        lines = []
        for out in engine.schedule(reqs):
            assert out.id is not None
            lines.append(f"S {out.id} {out.deliver_at_ms} .\n")
            pending.append(out.id)
        os.write(journal, "".join(lines).encode())
        if pending and rng.random() < 0.3:
            victim = pending.pop(rng.randrange(len(pending)))
            os.write(journal, f"c {victim} .\n".encode())
            if engine.cancel([victim]) == [CancelOutcome.CANCELLED]:
                os.write(journal, f"C {victim} .\n".encode())
        if pending and rng.random() < 0.1:
            victim = pending.pop(rng.randrange(len(pending)))
            os.write(journal, f"x {victim} .\n".encode())
            try:
                new = engine.reschedule(victim, delay_ms=rng.randint(0, 3000))
                os.write(journal, f"X {victim} {new.id} {new.deliver_at_ms} .\n".encode())
            except Exception:
                pass  # already delivered: fine
        got = engine.receive("t", "g", max_messages=200, invisible_ms=2000)
        if got:
            os.write(
                journal,
                "".join(f"R {m.id} {m.deliver_at_ms} {m.delivered_ms} .\n" for m in got).encode(),
            )
            if rng.random() < 0.8:
                engine.ack("t", "g", [m.receipt for m in got])
                os.write(journal, "".join(f"A {m.id} .\n" for m in got).encode())
        time.sleep(rng.random() * 0.004)


if __name__ == "__main__":
    main()
