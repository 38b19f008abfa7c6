"""``delayq top`` against a real local cluster (3 shards x 2 nodes, ``LocalCluster``):
its ``--once --json`` figures checked against a known workload, and the live view
run inside tmux, its screen read, sorted and quit by key presses.

The workload: topic ``later`` with 4, 12 and 24 messages an hour ahead on shards
0, 1 and 2 (keys chosen by the shard map's hash), so that sorting by pending
reverses the shards' order; topic ``orders`` with 30 messages due at once,
received by group ``billing`` and 4 of them acked, so 26 are its backlog; then
``billing`` limited to 60 in flight (20 a shard) and paused.

tmux is a system package (``make system-deps`` installs it): without it these
tests fail, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import delayq
from delayq.client import RetryPolicy
from delayq.shardmap import shard_of_key
from tests.support.cluster import LocalCluster, delayq_cli
from tests.support.servers import ROOT

pytestmark = pytest.mark.timeout(180)

SHARDS = 3
LATER = {0: 4, 1: 12, 2: 24}
"""Messages of topic ``later`` (an hour ahead) a shard."""
ORDERS, ACKED = 30, 4
RETRY = RetryPolicy(attempts=100, base_s=0.05, max_s=0.3)
SERVICE = Path(delayq.__file__).resolve().parents[1]
"""Where the delayq under test lives (a worktree's too), for processes run by tmux."""


def top(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``delayq top ARGS`` run to its end. The tests give each call a timeout of 2 s
    (``--timeout``): a short ``--interval``'s default would show a node slow on a
    busy machine as down."""
    return delayq_cli("top", *args, timeout_s=timeout_s)


def wait_for(
    what: str, get: Callable[[], Any], ok: Callable[[Any], bool], timeout_s: float = 30
) -> Any:
    """``get()`` once ``ok`` says so; AssertionError naming ``what`` (and the last value)
    after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = get()
        if ok(got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s}s; last:\n{got}")
        time.sleep(0.1)


def keys_for(count_by_shard: dict[int, int]) -> list[str]:
    keys: dict[int, list[str]] = {s: [] for s in count_by_shard}
    i = 0
    while any(len(keys[s]) < n for s, n in count_by_shard.items()):
        s = shard_of_key(f"later-{i}", SHARDS)
        if len(keys[s]) < count_by_shard[s]:
            keys[s].append(f"later-{i}")
        i += 1
    return [k for s in sorted(keys) for k in keys[s]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The cluster, every shard's replica in sync, the workload in place (module notes)."""
    dir = tmp_path_factory.mktemp("top") / "c"
    with LocalCluster(dir, shards=SHARDS, replicas=2) as c:
        for s in range(SHARDS):
            c.wait_insync(s, 2)
        with delayq.Client(c.address(0), retry=RETRY) as client:
            later = [
                delayq.Outgoing(topic="later", key=k, body=b"l", delay=3600)
                for k in keys_for(LATER)
            ]
            orders = [
                delayq.Outgoing(topic="orders", key=f"o{i}", body=b"o", delay=0)
                for i in range(ORDERS)
            ]
            for sent in client.schedule_many(later + orders):
                assert sent.ok, sent.error
            got: list[delayq.Received] = []
            deadline = time.monotonic() + 30
            while len(got) < ACKED and time.monotonic() < deadline:
                got += client.receive("orders", "billing", max_messages=ORDERS, wait_s=1)
            assert len(got) >= ACKED, got
            client.ack("orders", "billing", [m.receipt for m in got[:ACKED]])
            client.set_group_policy("orders", "billing", delayq.GroupPolicy(max_in_flight=60))
            client.pause_group("orders", "billing")

            def orders_stats() -> Any:
                return client.stats("orders").topic("orders")

            wait_for(
                "every order released",
                orders_stats,
                lambda t: t is not None and t.delivered == ORDERS and t.pending == 0,
            )
        yield c


def test_once_json_gives_each_node_topic_and_group_with_the_workloads_numbers(
    cluster: LocalCluster,
) -> None:
    def settled() -> dict[str, Any]:
        run = top(
            "--dir", str(cluster.dir), "--once", "--json", "--interval", "200ms", "--timeout", "2s"
        )
        assert run.returncode == 0, run.stderr
        doc: dict[str, Any] = json.loads(run.stdout)
        return doc

    doc = wait_for(  # the replicas have copied their masters (async replication)
        "replicas caught up",
        settled,
        lambda d: all(
            n["lag_bytes"] == 0 and n["pending"] == LATER[n["shard"]] for n in d["nodes"]
        ),
    )
    assert (doc["shards"], doc["shards_answering"], doc["nodes_answering"]) == (3, 3, 6)
    assert doc["source"] == f"dir {cluster.dir}" and doc["elapsed_s"] > 0 and doc["error"] == ""
    rows = [(n["shard"], n["node"], n["role"], n["epoch"], n["state"]) for n in doc["nodes"]]
    assert rows == [
        (s, f"node-{k}", "master" if k == 0 else "replica", 1, "serving")
        for s in range(SHARDS)
        for k in (0, 1)
    ]
    for n in doc["nodes"]:
        assert n["insync"] is True and n["lag_ms"] == 0
        assert n["insync_set"] == (["node-0", "node-1"] if n["role"] == "master" else [])
        assert 0 <= n["due_next_minute"] <= n["pending"]  # an hour ahead: 0, but bucket edges
        assert n["delivered"] >= 0 and n["delivered_per_s"] is not None
        assert isinstance(n["lateness_p99_ms"], int) and n["log_end"] > 0
    masters = {n["shard"]: n for n in doc["nodes"] if n["role"] == "master"}
    assert sum(m["delivered"] for m in masters.values()) == ORDERS
    topics = {t["topic"]: t for t in doc["topics"]}
    assert set(topics) == {"later", "orders"}
    assert (topics["later"]["pending"], topics["later"]["delivered"]) == (sum(LATER.values()), 0)
    assert (topics["orders"]["pending"], topics["orders"]["delivered"]) == (0, ORDERS)
    assert topics["later"]["due_next_minute"] == 0 == topics["orders"]["due_next_minute"]
    assert topics["orders"]["delivered_per_s"] == 0.0  # nothing delivered between the samples
    (billing,) = doc["groups"]
    assert {k: billing[k] for k in ("topic", "group", "backlog", "dead_lettered")} == {
        "topic": "orders",
        "group": "billing",
        "backlog": ORDERS - ACKED,
        "dead_lettered": 0,
    }
    # its policy is on every shard: each reports it, paused, with its share of 60
    assert (billing["shards"], billing["paused_shards"], billing["in_flight_limit"]) == (3, 3, 60)
    assert 0 <= billing["in_flight"] <= ORDERS - ACKED
    assert billing["throttled_per_s"] == 0.0  # no rate: never throttled
    assert billing["retries_per_s"] is not None and billing["retries_per_s"] >= 0
    text = top(
        "--dir",
        str(cluster.dir),
        "--once",
        "--interval",
        "100ms",
        "--timeout",
        "2s",
        "--sort",
        "pending",
    )
    assert text.returncode == 0, text.stderr
    assert "sort: pending" in text.stdout.splitlines()[0]
    by_server = top(
        "--server", cluster.address(1), "--once", "--json", "--interval", "100ms", "--timeout", "2s"
    )
    assert by_server.returncode == 0, by_server.stderr
    served = json.loads(by_server.stdout)
    assert [(n["shard"], n["address"], n["role"]) for n in served["nodes"]] == [
        (n["shard"], n["address"], n["role"]) for n in doc["nodes"]
    ]

    def steady(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Without what a lapse between the two runs may change (in flight, retries)."""
        return [
            {k: v for k, v in g.items() if k not in {"in_flight", "retries_per_s"}} for g in groups
        ]

    assert steady(served["groups"]) == steady(doc["groups"])
    assert served["source"] == f"server {cluster.address(1)}"


def test_a_node_that_does_not_answer_is_a_down_row_and_the_view_goes_on(
    cluster: LocalCluster,
) -> None:
    pid = cluster.node_pid(0, 1)
    os.kill(pid, signal.SIGSTOP)  # it holds its ports and answers nothing
    try:
        run = top(
            "--dir", str(cluster.dir), "--once", "--json", "--interval", "300ms", "--timeout", "2s"
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    states = {(n["shard"], n["node"]): n["state"] for n in doc["nodes"]}
    assert states.pop((0, "node-1")) == "down"
    assert set(states.values()) == {"serving"}
    down = next(n for n in doc["nodes"] if n["state"] == "down")
    assert (down["pending"], down["delivered_per_s"], down["lag_bytes"]) == (None, None, None)
    assert doc["shards_answering"] == 3 and doc["nodes_answering"] == 5


def test_no_node_answering_is_exit_code_1_and_no_cluster_is_2(tmp_path: Path) -> None:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        run = top("--server", f"127.0.0.1:{port}", "--once")
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith(f"delayq top: no node answered (server 127.0.0.1:{port}: ")
    run = top("--dir", str(tmp_path), "--once")
    assert run.returncode == 2 and "no cluster in" in run.stderr
    run = top("--dir", str(tmp_path), "--json")
    assert run.returncode == 2 and run.stderr == "delayq top: --json only with --once\n"


class Tmux:
    """A tmux server of its own (``-L``), so that nothing of the user's is touched."""

    def __init__(self) -> None:
        if shutil.which("tmux") is None:
            pytest.fail("tmux is not installed: run `make system-deps` (it installs tmux)")
        self.socket = f"delayq-top-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
        )

    def screen(self, session: str) -> str:
        got = self("capture-pane", "-p", "-t", session, check=False)
        return got.stdout if got.returncode == 0 else f"(no pane: {got.stderr.strip()})"

    def alive(self, session: str) -> bool:
        return self("has-session", "-t", session, check=False).returncode == 0

    def close(self) -> None:
        self("kill-server", check=False)


ROW = re.compile(
    r"^(\d+)\s+(node-\d)\s+(master|replica|fenced)\s+(\d+)\s+(serving|recovering|down)\b"
)


def node_rows(screen: str) -> list[tuple[int, str, str]]:
    """(shard, node, role) of the node table's rows, top to bottom."""
    return [(int(m[1]), m[2], m[3]) for line in screen.splitlines() if (m := ROW.match(line))]


def test_the_live_view_in_tmux_shows_every_shard_sorts_by_key_and_quits_on_q(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    tmux = Tmux()
    rc_file = tmp_path / "rc"
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SERVICE), os.environ.get("PYTHONPATH")]))
    }
    command = " ".join(
        [
            "env",
            *(shlex.quote(f"{k}={v}") for k, v in env.items()),
            shlex.quote(sys.executable),
            "-m delayq.cli.main top --dir",
            shlex.quote(str(cluster.dir)),
            f"; echo $? > {shlex.quote(str(rc_file))}",
        ]
    )
    session = "top"
    try:
        tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "40", "-c", str(ROOT), command)
        by_name = [
            (s, f"node-{k}", "master" if k == 0 else "replica")
            for s in range(SHARDS)
            for k in (0, 1)
        ]
        first = wait_for(
            "every shard's master row on the screen",
            lambda: tmux.screen(session),
            lambda text: node_rows(text) == by_name and "sort: shard, node" in text,
        )
        lines = first.splitlines()
        assert lines[0].startswith(f"delayq top - dir {cluster.dir}  topology epoch 1  3 shard(s)")
        assert len(lines) == 40 and lines[-1] == "q quit  s sort  ? help"  # on the bottom row
        assert "orders  billing" in first and "later" in first

        tmux("send-keys", "-t", session, "p")
        by_pending = [
            (s, f"node-{k}", "master" if k == 0 else "replica") for s in (2, 1, 0) for k in (0, 1)
        ]
        wait_for(
            "rows sorted by pending, shard 2's (24) first",
            lambda: tmux.screen(session),
            lambda text: node_rows(text) == by_pending and "sort: pending" in text,
        )
        tmux("send-keys", "-t", session, "?")
        wait_for(
            "the help line",
            lambda: tmux.screen(session),
            lambda text: "s/S next/previous sort" in text,
        )
        tmux("send-keys", "-t", session, "S")  # the sort before pending: by name again
        wait_for(
            "rows sorted by name again",
            lambda: tmux.screen(session),
            lambda text: node_rows(text) == by_name and "sort: shard, node" in text,
        )

        tmux("resize-window", "-t", session, "-x", "100", "-y", "30")
        small = wait_for(
            "the view drawn again at 100 x 30",
            lambda: tmux.screen(session),
            lambda text: (
                len(text.splitlines()) == 30
                and text.splitlines()[-1].startswith("q quit  s/S next/previous sort")
                and node_rows(text) == by_name
            ),
        )
        assert all(len(line) < 100 for line in small.splitlines())

        tmux("send-keys", "-t", session, "q")
        wait_for("the session ended", lambda: tmux.alive(session), lambda alive: not alive)
        assert rc_file.read_text().strip() == "0"
    finally:
        tmux.close()
