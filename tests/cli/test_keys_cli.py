"""The CLI's keys against a real server: ``send --if-exists`` (reject prints the id
that stands and exits 1; keep prints it and exits 0; replace schedules anew),
``--dedup-window``, and ``get``, ``reschedule`` and ``cancel`` by ``--topic`` and
``--key`` (ids or a key, never both: exit 2 naming what to give)."""

from __future__ import annotations

import json

from tests.cli.test_cli import Start, dq


def test_send_once_per_key_and_the_calls_by_key(start_server: Start) -> None:
    srv = start_server()
    s = ("--server", srv.address)
    send = ("send", *s, "--topic", "reminders", "--delay", "1h", "--key", "order-42")
    first = dq(*send, "--if-exists", "reject", "--dedup-window", "24h", "a")
    assert first.returncode == 0, first.stderr
    mid = first.stdout.strip()
    rejected = dq(*send, "--if-exists", "reject", "b")
    assert (rejected.returncode, rejected.stdout.strip()) == (1, mid)
    assert "ALREADY_EXISTS" in rejected.stderr
    kept = dq(*send, "--if-exists", "keep", "c")
    assert (kept.returncode, kept.stdout.strip()) == (0, mid)
    assert "kept" in kept.stderr
    replaced = dq(*send, "--if-exists", "replace", "d")
    assert replaced.returncode == 0 and replaced.stdout.strip() != mid
    new = replaced.stdout.strip()

    got = dq("get", *s, "--topic", "reminders", "--key", "order-42", "--json")
    assert got.returncode == 0, got.stderr
    [info] = [json.loads(line) for line in got.stdout.splitlines()]
    assert (info["id"], info["body"], info["state"]) == (new, "d", "pending")

    moved = dq("reschedule", *s, "--topic", "reminders", "--key", "order-42", "--delay", "2h")
    assert moved.returncode == 0 and moved.stdout.strip() not in ("", new)

    cancelled = dq("cancel", *s, "--topic", "reminders", "--key", "order-42", "--key", "none")
    assert cancelled.returncode == 1, "a key had nothing pending"
    assert cancelled.stdout.splitlines() == ["order-42: 1 cancelled", "none: 0 cancelled"]
    gone = dq("get", *s, "--topic", "reminders", "--key", "order-42")
    assert gone.returncode == 2 and "NOT_FOUND" in gone.stderr


def test_ids_or_a_key_never_both(start_server: Start) -> None:
    srv = start_server()
    s = ("--server", srv.address)
    for args, says in (
        (("cancel", *s), "give an id, or --topic and --key"),
        (("cancel", *s, "x", "--topic", "t", "--key", "k"), "not both"),
        (("get", *s, "--key", "k"), "--topic and --key go together"),
        (("reschedule", *s, "--topic", "t", "--delay", "1s"), "--topic and --key go together"),
    ):
        out = dq(*args)
        assert out.returncode == 2 and says in out.stderr, (args, out.stderr)
    bad = dq("send", *s, "--topic", "t", "--delay", "1s", "--dedup-window", "1h", "x")
    assert bad.returncode == 2 and "dedup_window_ms" in bad.stderr
