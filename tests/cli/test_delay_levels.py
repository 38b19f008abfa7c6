"""``delayq send --level N`` (RocketMQ 4's delay level) and ``delayq serve
--delay-levels`` against a real server process."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.cli.test_cli import dq
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]


def test_send_level_uses_the_servers_levels(start_server: Start) -> None:
    srv = start_server("--delay-levels", "1s 5s 10s 2h")
    s = ("--server", srv.address)
    sent = dq("send", *s, "--topic", "t", "--level", "3", "x")
    assert sent.returncode == 0, sent.stderr
    info = json.loads(dq("get", *s, sent.stdout.strip(), "--json").stdout)
    assert info["deliver_at_ms"] - info["accepted_at_ms"] == 10_000
    out_of_range = dq("send", *s, "--topic", "t", "--level", "5", "x")
    assert out_of_range.returncode == 2
    assert out_of_range.stderr == (
        "delayq send: INVALID_ARGUMENT: "
        "delay_level: must be 1..4 (the server's --delay-levels), got 5\n"
    )
    below = dq("send", *s, "--topic", "t", "--level", "0", "x")
    assert below.returncode == 2 and below.stderr.startswith("delayq send: level: must be 1..N")
    two = dq("send", *s, "--topic", "t", "--level", "2", "--delay", "5s", "x")
    assert two.returncode == 2 and "not allowed with argument" in two.stderr


def test_serve_names_a_bad_level_list() -> None:
    bad = dq("serve", "--delay-levels", "1s 5x", "--metrics-listen", "off")
    assert bad.returncode == 2
    assert (
        bad.stderr.strip()
        .splitlines()[-1]
        .startswith("delayq serve: delay_levels: item 2, '5x', is not a whole number")
    )
