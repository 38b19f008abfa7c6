"""The client imports ``delayq.recurrence`` (a schedule's spec is the typed
client's): checking and previewing a spec in a fresh interpreter loads no
numpy and none of the engine's packages."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.servers import ROOT

CODE = """
import json, sys
from delayq.recurrence import MessageTemplate, ScheduleSpec, check_spec, firings
spec = check_spec(ScheduleSpec(MessageTemplate("t"), cron="0 9 * * 1", time_zone="Europe/Paris"))
assert len(firings(spec, 0, 3)) == 3
heavy = ("numpy", "delayq.engine", "delayq.timers", "delayq.store", "delayq.formats")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "numpy"
                        or m.startswith(heavy[1:]))))
"""


def test_a_spec_is_checked_and_previewed_without_numpy_or_the_engine() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
