"""SIGKILL the engine's process at random moments under load, reopen, and check:
every acknowledged schedule is delivered (at-least-once), none before its time,
every acknowledged cancel holds, and acked messages do not come back."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from delayq import Engine, EngineSettings
from tests.engine.crash_child import SETTINGS
from tests.support.sizes import size

ROOT = Path(__file__).resolve().parents[2]


def _journal(path: Path) -> list[list[str]]:
    """The journal's whole lines: a kill may tear the line being written (every kill,
    not only the last), and a torn line lacks its closing " ."."""
    text = path.read_text() if path.exists() else ""
    lines = [line.split() for line in text.split("\n")]
    return [words[:-1] for words in lines if len(words) > 1 and words[-1] == "."]


@pytest.mark.long
def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data, journal = tmp_path / "data", tmp_path / "journal"
    rng = random.Random(int(os.environ.get("DELAYQ_CRASH_SEED", "7")))
    kills = size("DELAYQ_CRASH_KILLS", ci=6, long=30)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for i in range(kills):
        log = tmp_path / f"child{i}.log"  # a file, not a pipe: a chatty child never blocks
        with (
            log.open("wb") as err,
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.engine.crash_child",
                    str(data),
                    str(journal),
                    str(i),
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
            ) as child,
        ):
            try:  # killed at a random moment of its work, however long its start took
                assert child.stdout is not None
                assert child.stdout.readline() == b"running\n", log.read_text()
                time.sleep(rng.uniform(0.05, 1.2))
                assert child.poll() is None, log.read_text()
            finally:  # the kill under test; on a failure or an interrupt too, so that
                child.send_signal(signal.SIGKILL)  # leaving the block never waits on it

    entries = _journal(journal)
    due = {e[1]: int(e[2]) for e in entries if e[0] == "S"}
    for e in entries:
        if e[0] == "X":
            due[e[2]] = int(e[3])
    cancelled = {e[1] for e in entries if e[0] in ("C", "X")}
    # a cancel/reschedule attempted but not journaled as done may or may not have happened
    uncertain = {e[1] for e in entries if e[0] in ("c", "x")} - cancelled
    acked = {e[1] for e in entries if e[0] == "A"}
    received = {e[1] for e in entries if e[0] == "R"}
    for e in entries:
        if e[0] == "R":
            assert int(e[3]) >= int(e[2]), f"{e[1]} delivered early before a kill"
    assert len(due) > 200, "the load should have scheduled many messages"

    engine = Engine(EngineSettings(data_dir=data, **SETTINGS)).start()  # type: ignore[arg-type]
    try:
        assert engine.recovery["seconds"] < 5
        deadline = time.time() + 15
        final: dict[str, tuple[int, int]] = {}
        while time.time() < deadline:
            got = engine.receive("t", "g", max_messages=1000, wait_ms=200)
            for m in got:
                final[m.id] = (m.deliver_at_ms, m.delivered_ms)
            if got:
                engine.ack("t", "g", [m.receipt for m in got])
            expected = set(due) - cancelled
            if expected <= received | set(final) and time.time() * 1000 > max(due.values()) + 500:
                break
        for mid, (at, delivered) in final.items():
            assert delivered >= at, f"{mid} delivered early after recovery"
            if mid in due:
                assert at == due[mid]
        quarantine = data / "quarantine.log"
        skipped = quarantine.read_text() if quarantine.exists() else ""
        missing = set(due) - cancelled - uncertain - received - set(final)
        if missing:  # say what the engine thinks of them, and what the journal said
            why = {
                m: (engine.lookup(m).state.name, [e for e in entries if m in e]) for m in missing
            }
            raise AssertionError(
                f"{len(missing)} acknowledged messages lost: {why}; quarantined: {skipped!r}"
            )
        assert not skipped, f"a kill left records that could not be read: {skipped}"
        resurrected = cancelled & (received | set(final))
        assert not resurrected, f"cancelled messages delivered: {sorted(resurrected)[:3]}"
        assert not acked & set(final), "acked messages came back after a kill"
        assert engine.observing.counters["early"] == 0
    finally:
        engine.close()
