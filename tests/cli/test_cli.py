"""The ``delayq`` command against a real server process."""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.servers import EPHEMERAL, ROOT, ServerProcess

Start = Callable[..., ServerProcess]


def dq(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "delayq.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )


def test_send_get_receive_stats_cancel(start_server: Start) -> None:
    srv = start_server()
    s = ("--server", srv.address)
    sent = dq("send", *s, "--topic", "orders", "--delay", "2s", "hello")
    assert sent.returncode == 0, sent.stderr
    mid = sent.stdout.strip()
    # looked up an hour before it is due: still pending however slowly the CLI starts
    later = dq("send", *s, "--topic", "orders", "--delay", "1h", "--header", "k=v", "x")
    later_id = later.stdout.strip()
    info = json.loads(dq("get", *s, later_id, "--json").stdout)
    assert (info["state"], info["topic"], info["body"], info["headers"]) == (
        "pending",
        "orders",
        "x",
        {"k": "v"},
    )
    piped = dq(
        "send", *s, "--topic", "orders", "--at", "2000-01-01T00:00:00Z", "-", stdin="from stdin"
    )
    assert piped.returncode == 0
    rx = ("--topic", "orders", "--group", "g", "--count", "2", "--timeout", "5s", "--json")
    got = dq("receive", *s, *rx)
    assert got.returncode == 0, got.stderr
    lines = [json.loads(x) for x in got.stdout.splitlines()]
    assert sorted(x["body"] for x in lines) == ["from stdin", "hello"]
    assert all(x["delivered_at_ms"] >= x["deliver_at_ms"] for x in lines)
    again = dq("receive", *s, "--topic", "orders", "--group", "g", "--timeout", "500ms", "--json")
    assert again.stdout == "", "receive acks what it prints"
    stats = json.loads(dq("stats", *s, "orders", "--json").stdout)
    assert stats["topics"][0]["delivered"] == 2
    human = dq("stats", *s)
    assert "orders" in human.stdout and human.returncode == 0
    cancelled = dq("cancel", *s, mid)
    assert cancelled.returncode == 1 and "already_delivered" in cancelled.stdout
    moved = dq("reschedule", *s, later_id, "--delay", "2h")
    assert moved.returncode == 0 and moved.stdout.strip() != later_id
    assert json.loads(dq("get", *s, later_id, "--json").stdout)["state"] == "rescheduled"


def test_errors_are_one_line_and_non_zero(start_server: Start) -> None:
    srv = start_server()
    s = ("--server", srv.address)
    bad_topic = dq("send", *s, "--topic", "bad topic", "--delay", "1s", "x")
    assert bad_topic.returncode == 2
    assert bad_topic.stderr.count("\n") == 1 and "topic" in bad_topic.stderr
    bad_delay = dq("send", *s, "--topic", "t", "--delay", "soon", "x")
    assert bad_delay.returncode == 2 and "bad duration" in bad_delay.stderr
    naive = dq("send", *s, "--topic", "t", "--at", "2026-12-01T10:00:00", "x")
    assert naive.returncode == 2 and "zone" in naive.stderr
    unknown = dq("get", *s, "nope")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().startswith("delayq get: INVALID_ARGUMENT: id: malformed")
    down = dq("get", "--server", "127.0.0.1:1", "--timeout", "1s", "TQABADYx")
    assert down.returncode == 2 and "UNAVAILABLE" in down.stderr


def test_serve_refuses_bad_settings_and_a_busy_data_dir(start_server: Start) -> None:
    bad = dq("serve", "--flush", "sometimes")
    assert bad.returncode == 2 and "flush" in bad.stderr
    srv = start_server()
    busy = dq("serve", "--data-dir", str(srv.data_dir), *EPHEMERAL)
    assert busy.returncode == 2 and "in use" in busy.stderr
    assert "serve" in dq("--help").stdout and "--data-dir" in dq("serve", "--help").stdout


def test_serve_start_up_failures_end_in_one_clear_line(tmp_path: Path) -> None:
    """A data directory that cannot be used, and addresses already taken: exit code
    2, no traceback, and a last line saying what is wrong (the log lines before it
    are the usual ones)."""
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    data = str(tmp_path / "data")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        cases = {  # what is wrong -> the options (--listen, --metrics-listen, --data-dir)
            f"data directory {in_the_way} cannot be used": ("127.0.0.1:0", "off", in_the_way),
            f"cannot listen on {busy}": (busy, "off", data),
            f"cannot serve metrics on {busy}": ("127.0.0.1:0", busy, data),
        }
        for words, (listen, metrics, data_dir) in cases.items():
            got = dq(
                "serve",
                *("--listen", listen, "--metrics-listen", metrics, "--data-dir", str(data_dir)),
                *("--admin-listen", "127.0.0.1:0"),
            )
            assert got.returncode == 2, got.stderr
            assert "Traceback" not in got.stderr, got.stderr
            last = got.stderr.strip().splitlines()[-1]
            assert last.startswith(f"delayq serve: {words}"), got.stderr


def test_a_second_server_never_shares_a_port_in_use(start_server: Start, tmp_path: Path) -> None:
    """gRPC core opens ports with SO_REUSEPORT unless told not to: a second server on
    a port a running one listens on (public, admin, RocketMQ) would start and share its
    connections. Each such start fails at once, its last line naming the port."""
    srv = start_server("--rocketmq-listen", "127.0.0.1:0")
    cases = {  # the port taken -> the options that ask for it
        srv.address: ("--listen", srv.address, "--admin-listen", "127.0.0.1:0"),
        srv.admin_address: ("--listen", "127.0.0.1:0", "--admin-listen", srv.admin_address),
        srv.rocketmq_address: (
            *("--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"),
            *("--rocketmq-listen", srv.rocketmq_address),
        ),
    }
    for taken, options in cases.items():
        port = taken.rpartition(":")[2]
        data = tmp_path / f"second-{port}"
        got = dq("serve", "--data-dir", str(data), "--metrics-listen", "off", *options)
        assert got.returncode == 2, got.stderr
        last = got.stderr.strip().splitlines()[-1]
        assert last.startswith(f"delayq serve: cannot listen on {taken}"), got.stderr
        assert f"port {port} is in use" in last, got.stderr
    assert dq("stats", "--server", srv.address).returncode == 0  # the first one serves on
    for taken in cases:  # nor can any socket that asks to share (the serve's own probe aside)
        host, _, port = taken.rpartition(":")
        with socket.socket() as sharer:
            sharer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            with pytest.raises(OSError) as refused:
                sharer.bind((host, int(port)))
            assert refused.value.errno == errno.EADDRINUSE, taken


def test_a_groups_dead_letters_are_received_counted_and_replayed(start_server: Start) -> None:
    """Two attempts for group g (nacked with an invisibility of 1 ms each time): the
    message goes to dlq.g, Stats count it, and ``replay`` sends it home as it was."""
    import delayq

    srv = start_server("--max-delivery-attempts", "16 g=2")
    s = ("--server", srv.address)
    sent = dq("send", *s, "--topic", "jobs", "--delay", "0s", "--key", "k", "--header", "h=v", "x")
    assert sent.returncode == 0, sent.stderr
    with delayq.Client(srv.address) as c:
        for _ in range(2):
            (m,) = c.receive("jobs", "g", wait_s=5)
            c.change_invisibility("jobs", "g", [m.receipt], invisible_s=0)
        assert c.receive("jobs", "g", wait_s=0.5) == [], "no third attempt"
        (topic,) = c.stats("jobs").topics
        assert dict(topic.group_dead_lettered) == {"g": 1}
    replay = dq("replay", *s, "--group", "g", "--count", "1", "--timeout", "5s")
    assert replay.returncode == 0, replay.stderr
    assert "replayed 1 dead letters of group g" in replay.stderr
    with delayq.Client(srv.address) as c:
        (back,) = c.receive("jobs", "g", wait_s=5)
        assert (back.body, back.key, dict(back.headers)) == (b"x", "k", {"h": "v"})
        assert c.receive("dlq.g", "g", wait_s=0.3) == [], "replay acked the dead letter"
