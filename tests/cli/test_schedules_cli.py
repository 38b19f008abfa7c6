"""``delayq schedules`` against a real server: create (a cron in a zone, an
interval), get and list (fields, ``--json``), update keeping what is not given,
pause and resume, next (a stored schedule's times and a preview's, with the local
time beside), delete; a bad spec exits 2 naming the field; the client commands
load the client alone (tests/cli/test_light_import.py covers the module list)."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

from tests.cli.test_cli import Start, dq


def test_create_get_list_update_pause_resume_next_delete(start_server: Start) -> None:
    srv = start_server()
    s = ("--server", srv.address)
    made = dq("schedules", "create", *s, "nightly", "--cron", "30 2 * * *",
              "--tz", "America/New_York", "--topic", "reports", "--body", "run",
              "--header", "tenant=acme", "--catch-up", "all", "--catch-up-window", "6h",
              "--jitter", "10s", "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    assert info["name"] == "nightly" and not info["paused"] and info["next_fire_ms"] > 0
    spec = info["spec"]
    assert (spec["cron"], spec["time_zone"], spec["catch_up"]) == (
        "30 2 * * *", "America/New_York", "all"
    )  # fmt: skip
    assert (spec["catch_up_window_ms"], spec["jitter_ms"]) == (6 * 3_600_000, 10_000)
    assert spec["template"] == {"topic": "reports", "body": "run", "headers": {"tenant": "acme"}}
    local = datetime.fromtimestamp(info["next_fire_ms"] / 1000, ZoneInfo("America/New_York"))
    assert (local.hour, local.minute) == (2, 30) or (local.hour, local.minute) == (3, 0)

    every = dq("schedules", "create", *s, "beat", "--every", "30s", "--topic", "beats")
    assert every.returncode == 0, every.stderr
    assert "every 30s" in every.stdout and "active" in every.stdout

    shown = dq("schedules", "get", *s, "nightly")
    assert shown.returncode == 0 and "cron '30 2 * * *' in America/New_York" in shown.stdout
    listed = dq("schedules", "list", *s, "--json")
    assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == ["beat", "nightly"]
    one = dq("schedules", "list", *s, "--limit", "1")
    assert one.returncode == 0 and len(one.stdout.splitlines()) == 1 and "beat" in one.stdout

    upd = dq("schedules", "update", *s, "nightly", "--cron", "0 4 * * *", "--json")
    assert upd.returncode == 0, upd.stderr
    after = json.loads(upd.stdout)["spec"]
    assert after["cron"] == "0 4 * * *" and after["time_zone"] == "America/New_York", "kept"
    assert after["template"]["headers"] == {"tenant": "acme"} and after["catch_up"] == "all"

    nxt = dq("schedules", "next", *s, "nightly", "--count", "3", "--json")
    times = json.loads(nxt.stdout)
    assert len(times) == 3
    for t in times:
        d = datetime.fromtimestamp(t / 1000, ZoneInfo("America/New_York"))
        assert (d.hour, d.minute) == (4, 0)
    text = dq("schedules", "next", *s, "nightly", "--count", "2")
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 2
    assert all(" 04:00:00 E" in line for line in text.stdout.splitlines()), text.stdout

    paused = dq("schedules", "pause", *s, "nightly", "--json")
    assert json.loads(paused.stdout)["paused"] is True
    assert json.loads(dq("schedules", "next", *s, "nightly", "--json").stdout) == []
    resumed = dq("schedules", "resume", *s, "nightly")
    assert resumed.returncode == 0 and "active" in resumed.stdout

    gone = dq("schedules", "delete", *s, "nightly")
    assert gone.returncode == 0, gone.stderr
    missing = dq("schedules", "get", *s, "nightly")
    assert missing.returncode == 2 and "NOT_FOUND" in missing.stderr


def test_a_preview_without_a_name(start_server: Start) -> None:
    srv = start_server()
    s = ("--server", srv.address)
    got = dq("schedules", "next", *s, "--cron", "0 12 29 2 *", "--count", "2", "--json")
    assert got.returncode == 0, got.stderr
    years = [datetime.fromtimestamp(t / 1000, ZoneInfo("UTC")) for t in json.loads(got.stdout)]
    assert [(d.month, d.day, d.hour) for d in years] == [(2, 29, 12)] * 2
    assert years[1].year - years[0].year == 4, "29 February: leap years only"
    both = dq("schedules", "next", *s, "x", "--every", "1m")
    neither = dq("schedules", "next", *s)
    for bad in (both, neither):
        assert bad.returncode == 2 and "give a schedule's NAME, or --cron or --every" in bad.stderr
    assert dq("schedules", "list", *s).stdout == "", "a preview stores nothing"


def test_bad_specs_exit_2_naming_the_field(start_server: Start) -> None:
    srv = start_server()
    s = ("--server", srv.address)
    for args, field in (
        (("--cron", "0 9 * * FRI-MON-X", "--topic", "t"), "spec.cron"),
        (("--every", "500ms", "--topic", "t"), "spec.every_ms"),
        (("--every", "1m", "--topic", "t", "--tz", "Moon/Base"), "spec.time_zone"),
        (("--every", "1m", "--topic", "_schedules"), "spec.template.topic"),
        (("--every", "1m", "--topic", "t", "--header", "delayq-x=1"), "spec.template.headers"),
    ):  # fmt: skip
        bad = dq("schedules", "create", *s, "x", *args)
        assert bad.returncode == 2 and "INVALID_ARGUMENT" in bad.stderr, bad.stderr
        assert field in bad.stderr, (field, bad.stderr)
    assert dq("schedules", "create", *s, "x", "--every", "1m", "--topic", "t").returncode == 0
    noarg = dq("schedules", "create", *s, "y", "--topic", "t")
    assert noarg.returncode == 2 and "--cron" in noarg.stderr
