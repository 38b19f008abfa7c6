"""A client user loads no engine: ``import delayq``, and the CLI's client commands
run against a real server, leave ``sys.modules`` free of the engine, the store,
the timers, delivery, the record formats, the server, numpy and pyarrow (each
checked in a fresh interpreter: what another test imported does not count)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from tests.support.servers import ROOT, ServerProcess

Start = Callable[..., ServerProcess]

HEAVY = (
    "delayq.engine",
    "delayq.store",
    "delayq.timers",
    "delayq.delivery",
    "delayq.formats",
    "delayq.server",
    "delayq.replication",
    "delayq.cluster",
    "delayq.control",
    "delayq.verify",
    "delayq.rocketmq",
    "numpy",
    "pyarrow",
)

REPORT = """
import json, sys
heavy = {heavy!r}
print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy) and
                        (m in heavy or m.startswith(tuple(h + "." for h in heavy))))))
"""


def _loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", code + REPORT.format(heavy=HEAVY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_import_delayq_loads_no_engine_and_no_numpy() -> None:
    assert _loaded_after("import delayq, delayq.client") == []
    # the check can fail: the embedded API loads the engine when asked for
    assert "delayq.engine" in _loaded_after("import delayq; delayq.Engine")


def test_the_clis_client_commands_load_no_engine_and_no_numpy(start_server: Start) -> None:
    srv = start_server()
    code = f"""
import io, contextlib
from delayq.cli.main import main
s = ["--server", {srv.address!r}]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert main(["send", *s, "--topic", "t", "--delay", "1h", "x"]) == 0
mid = out.getvalue().strip()
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["get", *s, mid]) == 0
    assert main(["reschedule", *s, mid, "--delay", "2h"]) == 0
    assert main(["cancel", *s, mid]) == 1  # rescheduled: nothing left to cancel
    assert main(["stats", *s]) == 0
    assert main(["schedules", "create", *s, "n", "--every", "1h", "--topic", "t"]) == 0
    assert main(["schedules", "list", *s]) == 0
    assert main(["schedules", "next", *s, "--cron", "0 9 * * *", "--tz", "Europe/Paris"]) == 0
"""
    assert _loaded_after(code) == []
