"""``delayq cluster up|status`` with real node processes (``LocalCluster``)."""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

import delayq
from delayq.client import RetryPolicy
from delayq.cluster import plan
from delayq.ids import MessageId
from delayq.shardmap import parse
from tests.support.cluster import PORTS_PER_NODE, LocalCluster, cluster_cli, free_base_port

pytestmark = pytest.mark.timeout(180)

ROW_KEYS = {"shard", "node", "role", "epoch", "address", "pid", "state", "log_end", "lag_bytes"}
NEW_ROW_KEYS = {"flushed", "lag_ms", "fenced", "lease_valid", "high_water", "insync", "failovers"}


def test_three_shards_come_up_and_status_says_so_exactly(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", shards=3) as c:
        assert c.map is not None and c.map.count == 3
        assert c.map == parse((c.dir / "shards.json").read_text())
        assert len(c.lines) == 4 and c.lines[-1] == (
            f"cluster up: 3 shard(s), 1 node(s) each, map {c.dir / 'shards.json'}"
        )
        assert sorted(line.split()[1] for line in c.lines[:3]) == [
            "shard-0/node-0",
            "shard-1/node-0",
            "shard-2/node-0",
        ]
        st = c.status()
        assert set(st) == {"topology_epoch", "nodes", "shards"} and st["topology_epoch"] == 1
        assert all(set(n) == ROW_KEYS | NEW_ROW_KEYS for n in st["nodes"])
        assert st["shards"] == [
            {"shard": s, "epoch": 1, "master": "node-0", "insync": ["node-0"], "failovers": 0,
             "stuck": "", "in_office": True}
            for s in range(3)
        ]  # fmt: skip
        assert [(n["shard"], n["node"], n["role"], n["state"]) for n in st["nodes"]] == [
            (s, "node-0", "master", "serving") for s in range(3)
        ]
        assert [n["address"] for n in st["nodes"]] == list(c.map.masters())
        metrics = [n["metrics_address"] for n in c.state()["nodes"]]
        ports = [a.rpartition(":")[2] for a in [*c.map.masters(), *metrics]]
        assert len(set(ports)) == 6, ports
        targets = json.loads((c.dir / "prometheus-targets.json").read_text())
        assert targets == [
            {"targets": [a], "labels": {"shard": str(s), "node": "node-0"}}
            for s, a in enumerate(metrics)
        ], "Prometheus' file_sd targets: every node's metrics, labelled"
        assert [n["pid"] for n in st["nodes"]] == [c.node_pid(s) for s in range(3)]
        assert all(
            n["epoch"] >= 1 and n["log_end"] > 0 and n["lag_bytes"] == 0 for n in st["nodes"]
        )
        text = cluster_cli("status", "--dir", str(c.dir))
        assert text.returncode == 0, text.stderr
        assert text.stdout.splitlines()[0] == "topology epoch 1: 3 of 3 node(s) serving"
        assert c.state()["state"] == "running" and c.state()["supervisor_pid"] == c.proc.pid  # type: ignore[union-attr]


def test_a_killed_node_comes_back_on_its_data_and_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    """Messages keyed over every shard are scheduled before and while shard 1's
    node is SIGKILLed and restarted; every acknowledged id is found afterwards and
    delivered exactly once (a retried batch may add a second copy of a body whose
    first reply was lost with the node, never a loss)."""
    with LocalCluster(tmp_path / "c", shards=3) as c:
        address, pid = c.address(1), c.node_pid(1)
        retry = RetryPolicy(attempts=100, base_s=0.05, max_s=0.3)
        with delayq.Client(c.address(0), timeout_s=30, retry=retry) as client:
            acked: dict[str, str] = {}  # id -> body
            counter = iter(range(1_000_000))

            def send_batch() -> None:
                batch = []
                for _ in range(30):
                    i = next(counter)
                    batch.append(delayq.Outgoing(topic="t", body=b"m%d" % i, key=f"k{i}", delay=1))
                for out, sent in zip(batch, client.schedule_many(batch), strict=True):
                    assert sent.ok, sent.error
                    assert sent.id is not None
                    acked[sent.id] = out.body.decode()

            for _ in range(5):
                send_batch()
            after_restart = threading.Event()
            errors: list[BaseException] = []

            def keep_sending() -> None:  # until a whole batch began after the restart
                try:
                    while True:
                        last = after_restart.is_set()
                        send_batch()
                        if last:
                            return
                except BaseException as exc:
                    errors.append(exc)

            sender = threading.Thread(target=keep_sending)
            sender.start()
            time.sleep(0.2)
            assert c.kill(1, 0, signal.SIGKILL) == pid
            c.wait_serving(30)
            after_restart.set()
            sender.join(60)
            assert not sender.is_alive() and not errors, errors

            assert c.address(1) == address and c.node_pid(1) not in (0, pid)
            assert c.state()["nodes"][1]["restarts"] == 1
            shards = {MessageId.parse(i).shard for i in acked}
            assert shards == {0, 1, 2}
            for mid in acked:
                assert client.lookup(mid).state in ("pending", "delivered"), mid

            seen: collections.Counter[str] = collections.Counter()
            bodies: dict[str, str] = {}
            deadline = time.monotonic() + 60
            while not set(acked) <= set(seen) and time.monotonic() < deadline:
                got = client.receive("t", "g", max_messages=500, wait_s=1, invisible_s=60)
                seen.update(m.id for m in got)
                bodies.update((m.id, m.body.decode()) for m in got)
                if got:
                    client.ack("t", "g", [m.receipt for m in got])
            assert client.receive("t", "g", max_messages=500, wait_s=0.5) == []
        assert set(acked) <= set(seen), f"{len(set(acked) - set(seen))} acknowledged ids lost"
        assert all(seen[i] == 1 for i in acked), "an acknowledged message came twice"
        extra = set(seen) - set(acked)
        assert {bodies[i] for i in extra} <= set(acked.values()), "only retried copies"
        records = [r for r in c.log_records() if r.get("msg", "").startswith("node shard-1")]
        assert any("exited (SIGKILL)" in r["msg"] and r["pid"] == pid for r in records)


def test_sigterm_stops_every_node_and_exits_0(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", shards=2) as c:
        pids = [c.node_pid(s) for s in range(2)]
        assert c.stop(signal.SIGTERM) == 0
        assert not c.group_alive()
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        state = c.state()
        assert state["state"] == "stopped" and [n["pid"] for n in state["nodes"]] == [0, 0]
        down = cluster_cli("status", "--dir", str(c.dir), "--json")
        assert down.returncode == 1
        assert [n["state"] for n in json.loads(down.stdout)["nodes"]] == ["down", "down"]
        assert not [r for r in c.log_records() if "restarted" in r.get("msg", "")]


def test_ctrl_c_to_the_group_stops_it_without_restarts(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the supervisor and its nodes at once."""
    with LocalCluster(tmp_path / "c", shards=2) as c:
        assert c.proc is not None
        os.killpg(c.proc.pid, signal.SIGINT)
        assert c.proc.wait(30) == 0
        assert c.stop() == 0 and not c.group_alive()
        assert not [r for r in c.log_records() if "restarted" in r.get("msg", "")]


def test_a_stopped_cluster_comes_back_on_its_data_and_map(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", shards=2) as c:
        with delayq.Client(c.address(0)) as client:
            ids = [client.schedule("t", b"x", key=f"k{i}", delay=3600).id for i in range(20)]
        first = c.map
    with LocalCluster(tmp_path / "c", shards=2, base_port=c.base_port) as again:
        assert again.map == first and again.map is not None and again.map.topology_epoch == 1
        with delayq.Client(again.address(1)) as client:
            assert {client.lookup(i).state for i in ids if i} == {"pending"}


def test_a_crash_looping_node_is_restarted_with_a_growing_back_off(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", shards=1) as c:
        data = c.dir / "shard-0" / "node-0"
        data.rename(data.with_name("moved"))
        data.write_text("in the way")  # every start now fails at once (exit 2)
        c.kill(0)
        deadline = time.monotonic() + 30
        while len(waits := _restart_waits(c)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert waits[:3] == [0.5, 1.0, 2.0], waits
        exits = [r for r in c.log_records() if r.get("msg", "").startswith("node shard-0/node-0")]
        assert any("cannot be used" in r.get("last_log_line", "") for r in exits), exits
        data.unlink()
        data.with_name("moved").rename(data)
        c.wait_serving(30)


def _restart_waits(c: LocalCluster) -> list[float]:
    return [float(r["restart_in_s"]) for r in c.log_records() if "restart_in_s" in r]


def test_bad_options_and_another_shard_count_are_refused_in_one_line(tmp_path: Path) -> None:
    many = cluster_cli("up", "--dir", str(tmp_path / "a"), "--replicas", "10")
    assert many.returncode == 2 and many.stderr.count("\n") == 1, many.stderr
    assert many.stderr.startswith("delayq cluster up: --replicas must be 1..9")
    short = cluster_cli("up", "--dir", str(tmp_path / "a"), "--replicas", "2", "--lease", "500ms")
    assert short.returncode == 2 and "the lease (500 ms) is too short" in short.stderr, short.stderr
    assert not (tmp_path / "a").exists()
    bad = cluster_cli("up", "--dir", str(tmp_path / "a"), "--replication", "maybe")
    assert bad.returncode == 2 and "--replication" in bad.stderr
    existing = tmp_path / "b"
    existing.mkdir()
    (existing / "shards.json").write_text(plan(existing, shards=2).shard_map().dumps())
    more = cluster_cli("up", "--dir", str(existing), "--shards", "3")
    assert more.returncode == 2 and more.stderr.count("\n") == 1, more.stderr
    assert "describes 2 shard(s), not 3: change it with `delayq cluster scale`" in more.stderr
    assert not (existing / "cluster.json").exists() and not (existing / "shard-0").exists()
    nothing = cluster_cli("status", "--dir", str(tmp_path / "none"))
    assert nothing.returncode == 2 and "no cluster in" in nothing.stderr


def test_a_port_in_use_is_named(tmp_path: Path) -> None:
    base = free_base_port(2 * PORTS_PER_NODE)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + PORTS_PER_NODE))  # shard 1's gRPC port
        taken.listen()
        run = cluster_cli(
            "up", "--dir", str(tmp_path / "c"), "--shards", "2", "--base-port", str(base)
        )
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr == (
        f"delayq cluster up: port {base + PORTS_PER_NODE} on 127.0.0.1 (gRPC of shard-1/node-0) "
        "is in use: "
        "stop what holds it or choose another --base-port\n"
    )
    assert not (tmp_path / "c" / "cluster.json").exists()
