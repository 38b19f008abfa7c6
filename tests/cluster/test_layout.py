"""The local cluster's pure parts: layout, shard map across runs, back-off, the
cluster.json record and the status rows."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from delayq.cluster import ClusterError, plan
from delayq.cluster.certs import LocalTls
from delayq.cluster.clusterfile import RUNNING, ClusterState, NodeRecord
from delayq.cluster.clusterfile import parse as parse_state
from delayq.cluster.layout import Placement, parse_placement
from delayq.cluster.nodeprocess import serve_argv
from delayq.cluster.probe import Probe
from delayq.cluster.readylines import READY_PREFIX, node_line, ready_line
from delayq.cluster.restarts import RestartPolicy
from delayq.cluster.statusreport import report
from delayq.cluster.takeover import take_records
from delayq.control.record import ShardRecord
from delayq.shardmap import ShardEntry, ShardMap, parse

DIR = Path("/c")
ROW_KEYS = {
    "shard", "node", "role", "epoch", "address", "pid", "state", "log_end", "lag_bytes"
}  # fmt: skip
"""Issue 33's keys of a status row (kept, with their meaning)."""
NEW_ROW_KEYS = {
    "flushed", "lag_ms", "fenced", "lease_valid", "high_water", "insync", "failovers"
}  # fmt: skip


def test_every_node_has_its_own_ports_dirs_and_log() -> None:
    lay = plan(DIR, shards=4, base_port=9000)
    assert [
        (n.shard, n.index, n.port, n.metrics_port, n.admin_port, n.rocketmq_port) for n in lay.nodes
    ] == [
        (0, 0, 9000, 9001, 9002, 9003),
        (1, 0, 9004, 9005, 9006, 9007),
        (2, 0, 9008, 9009, 9010, 9011),
        (3, 0, 9012, 9013, 9014, 9015),
    ]
    ports = [p for n in lay.nodes for p, _ in n.ports()]
    assert len(set(ports)) == len(ports)
    n = lay.node(2, 0)
    assert (n.name, n.label, n.address, n.metrics_address, n.admin_address) == (
        "node-0",
        "shard-2/node-0",
        "127.0.0.1:9008",
        "127.0.0.1:9009",
        "127.0.0.1:9010",
    )
    assert n.rocketmq_address == "127.0.0.1:9011"
    assert (n.data_dir, n.log_path) == (DIR / "shard-2/node-0", DIR / "shard-2/node-0.log")
    assert (lay.map_path, lay.state_path) == (DIR / "shards.json", DIR / "cluster.json")
    assert plan(DIR).shards == 3 and plan(DIR).base_port == 7500


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"replicas": 10}, "--replicas must be 1..9"),
        ({"replicas": 0}, "--replicas must be at least 1"),
        ({"replicas": 3, "min_insync": 0}, "--min-insync must be at least 1"),
        ({"shards": 0}, "--shards must be 1..1024"),
        ({"replication": "quorum"}, "--replication must be one of async, sync"),
        ({"base_port": 65531}, "--base-port 65531: 3 node(s) need ports 65531-65542"),
        ({"base_port": 0}, "--base-port 0"),
    ],
)
def test_options_that_cannot_be_used_are_refused_by_name(
    options: dict[str, object], words: str
) -> None:
    with pytest.raises(ClusterError, match="^" + re.escape(words)):
        plan(DIR, **options)  # type: ignore[arg-type]


def test_the_map_is_new_kept_or_raised_but_never_resharded() -> None:
    lay = plan(DIR, shards=2, base_port=9000)
    fresh = lay.shard_map()
    assert fresh.topology_epoch == 1 and fresh.masters() == ("127.0.0.1:9000", "127.0.0.1:9004")
    assert parse(fresh.dumps()) == fresh
    kept = ShardMap(
        topology_epoch=4,
        shards=tuple(
            ShardEntry(index=s.index, master=s.master, epoch=3, admin=s.admin, rocketmq=s.rocketmq)
            for s in fresh.shards
        ),
    )
    assert [s.admin for s in fresh.shards] == ["127.0.0.1:9002", "127.0.0.1:9006"]
    assert [s.rocketmq for s in fresh.shards] == ["127.0.0.1:9003", "127.0.0.1:9007"]
    assert lay.shard_map(kept) is kept, "same shards, same addresses: the map as it was"
    moved = plan(DIR, shards=2, base_port=9100).shard_map(kept)
    assert moved.topology_epoch == 5 and moved.masters()[0] == "127.0.0.1:9100"
    assert [s.epoch for s in moved.shards] == [3, 3], "the shards' epochs stay"
    with pytest.raises(
        ClusterError,
        match=re.escape("describes 2 shard(s), not 3: change it with `delayq cluster scale`"),
    ):
        plan(DIR, shards=3, base_port=9000).shard_map(kept)


def test_a_crash_loop_backs_off_and_a_stable_run_resets_it() -> None:
    p = RestartPolicy(first_s=0.5, factor=2, max_s=3, stable_s=10)
    delays, last = [], None
    for _ in range(5):
        last = p.delay_s(last, ran_s=0.2)
        delays.append(last)
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert p.delay_s(3.0, ran_s=10) == 0.5
    assert p.delay_s(3.0, ran_s=0.2, served=True) == 0.5  # it came up: killed, not looping
    with pytest.raises(ValueError):
        RestartPolicy(first_s=0)


def test_the_cluster_record_round_trips() -> None:
    rec = _record(address="127.0.0.1:9002", pid=42, restarts=2, log="/c/shard-1/node-0.log")
    st = ClusterState(supervisor_pid=7, state=RUNNING, replication="async", nodes=(rec,))
    assert parse_state(st.dumps()) == st
    assert st.by_address() == {"127.0.0.1:9002": rec}
    with pytest.raises(ClusterError, match=r"x.json: nodes\[0\]: not a record"):
        parse_state(json.dumps({**json.loads(st.dumps()), "nodes": [{}]}), "x.json")
    shard = ShardRecord(
        shard=1, epoch=3, master="node-2", insync=frozenset({"node-2", "node-0"}), failovers=2,
        stuck="why", in_office=False,
    )  # fmt: skip
    both = dataclasses.replace(st, shards=(shard,), min_insync=2)
    assert json.loads(both.dumps())["shards"] == [
        {"shard": 1, "epoch": 3, "master": "node-2", "insync": ["node-0", "node-2"],
         "failovers": 2, "stuck": "why", "in_office": False}
    ]  # fmt: skip
    assert parse_state(both.dumps()) == both and both.by_shard() == {1: shard}
    old = json.loads(st.dumps())
    del old["shards"], old["min_insync"]  # a file from before replication
    assert parse_state(json.dumps(old)) == st
    bad = {**json.loads(both.dumps()), "shards": [{"shard": 1, "epoch": 0, "master": "n",
                                                   "insync": []}]}  # fmt: skip
    with pytest.raises(ClusterError, match=r"shards\[0\]: shard 1: epoch must be >= 1"):
        parse_state(json.dumps(bad))


def test_a_replicated_layout_names_nodes_and_follows_the_recorded_master() -> None:
    lay = plan(DIR, shards=2, replicas=3, base_port=9000, replication="sync", min_insync=5)
    assert lay.min_insync == 3 and lay.view_min_insync == 3, "at most R"
    assert plan(DIR, replicas=3).view_min_insync == 1, "async: the master's append acks"
    assert [(n.shard, n.name, n.port) for n in lay.shard_nodes(1)] == [
        (1, "node-0", 9012), (1, "node-1", 9016), (1, "node-2", 9020)
    ]  # fmt: skip
    fresh = lay.shard_map()
    assert fresh.shards[1] == ShardEntry(
        index=1,
        master="127.0.0.1:9012",
        replicas=("127.0.0.1:9016", "127.0.0.1:9020"),
        admin="127.0.0.1:9014",
        rocketmq="127.0.0.1:9015",
    )
    moved = lay.shard_map(fresh, {1: ("node-2", 4)})
    assert moved.topology_epoch == 2 and moved.shards[0] == fresh.shards[0]
    assert moved.shards[1] == ShardEntry(
        index=1,
        master="127.0.0.1:9020",
        replicas=("127.0.0.1:9012", "127.0.0.1:9016"),
        epoch=4,
        admin="127.0.0.1:9022",
        rocketmq="127.0.0.1:9023",
    )
    assert lay.shard_map(moved, {1: ("node-2", 4)}) is moved
    with pytest.raises(ClusterError, match="shard 1: the recorded master node-3 is not one"):
        lay.entry(1, "node-3", 4)
    argv = serve_argv("py", lay.node(1, 2), lay.map_path, replication="sync", min_insync=3,
                      follow="127.0.0.1:9006")  # fmt: skip
    flags = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert (flags["--node-name"], flags["--replication"], flags["--min-insync"]) == (
        "node-2", "sync", "3"
    )  # fmt: skip
    assert flags["--follow"] == "127.0.0.1:9006"
    master = serve_argv("py", lay.node(1, 0), lay.map_path, replication="async", min_insync=2)
    assert "--follow" not in master and "--node-name" in master
    files = LocalTls(DIR / "tls")
    tls = serve_argv("py", lay.node(1, 0), lay.map_path, replication="async", tls=files)
    flags = dict(zip(tls[4::2], tls[5::2], strict=True))
    assert (flags["--tls-cert"], flags["--tls-key"], flags["--admin-client-ca"]) == (
        str(files.node_cert), str(files.node_key), str(files.ca)
    )  # fmt: skip
    assert flags["--node-name"] == "node-0"


def test_records_are_taken_from_an_earlier_run(tmp_path: Path) -> None:
    lay = plan(tmp_path, shards=2, replicas=3)
    fresh = take_records(lay, None)
    assert fresh == {
        s: ShardRecord(shard=s, epoch=1, master="node-0", insync=frozenset({"node-0"}))
        for s in range(2)
    }
    earlier = ShardRecord(
        shard=1, epoch=5, master="node-2", insync=frozenset({"node-2", "node-1"}), stuck="x"
    )
    st = ClusterState(supervisor_pid=1, state="stopped", replication="async", nodes=(),
                      shards=(earlier,))  # fmt: skip
    lay.state_path.write_text(st.dumps())
    taken = take_records(lay, lay.shard_map())
    assert taken[1] == dataclasses.replace(earlier, stuck="")
    assert taken[0].master == "node-0"
    fewer = plan(tmp_path, shards=2, replicas=2)
    with pytest.raises(ClusterError, match="the recorded master node-2 is not one of its 2"):
        take_records(fewer, None)
    lay.state_path.write_text(dataclasses.replace(st, shards=(
        dataclasses.replace(earlier, master="node-1"),)).dumps())  # fmt: skip
    assert take_records(fewer, None)[1].insync == {"node-1"}, "node-2 is gone"


def test_status_rows_say_what_each_node_is() -> None:
    m = ShardMap(
        topology_epoch=2,
        shards=(
            ShardEntry(index=0, master="h:1", replicas=("h:2",), epoch=4),
            ShardEntry(index=1, master="h:3", epoch=5),
        ),
    )

    def node(end: int, role: str = "master") -> dict[str, object]:
        return {"role": role, "epoch": 4, "commitlog_end": end}

    probes = {
        "h:1": Probe(state="serving", node=node(1000)),
        "h:2": Probe(state="serving", node=node(400, "replica")),
        "h:3": Probe(state="down"),
    }
    records = {"h:3": _record(address="h:3", pid=9)}
    r = report(m, records, probes)
    got = [
        (x.shard, x.node, x.role, x.epoch, x.pid, x.state, x.log_end, x.lag_bytes) for x in r.nodes
    ]
    assert got == [
        (0, "-", "master", 4, 0, "serving", 1000, 0),
        (0, "-", "replica", 4, 0, "serving", 400, 600),
        (1, "node-0", "master", 5, 9, "down", 0, 0),  # the map's role and epoch
    ]
    assert r.exit_code == 1
    doc = json.loads(r.to_json())
    assert set(doc) == {"topology_epoch", "nodes", "shards"} and doc["topology_epoch"] == 2
    assert all(set(n) == ROW_KEYS | NEW_ROW_KEYS for n in doc["nodes"])
    assert doc["nodes"][2] == {  # issue 33's keys keep their meaning; the new ones are 0
        "shard": 1, "node": "node-0", "role": "master", "epoch": 5, "address": "h:3",
        "pid": 9, "state": "down", "log_end": 0, "lag_bytes": 0, "flushed": 0, "lag_ms": 0,
        "fenced": False, "lease_valid": False, "high_water": 0, "insync": [], "failovers": 0,
    }  # fmt: skip
    text = r.to_text().splitlines()
    assert text[0] == "topology epoch 2: 2 of 3 node(s) serving"
    assert text[1].split() == [
        "SHARD", "NODE", "ROLE", "EPOCH", "ADDRESS", "PID", "STATE", "LOG_END", "LAG",
        "LAG_MS", "FLUSHED", "HW", "FENCED", "INSYNC",
    ]  # fmt: skip
    assert text[4].split() == [
        "1", "node-0", "master", "5", "h:3", "9", "down", "0", "0", "0", "0", "0", "-", "-"
    ]  # fmt: skip


def _record(**over: object) -> NodeRecord:
    doc: dict[str, object] = {
        "shard": 1,
        "node": "node-0",
        "address": "",
        "metrics_address": "",
        "pid": 0,
        "restarts": 0,
        "data_dir": "",
        "log": "",
    }
    return NodeRecord(**{**doc, **over})  # type: ignore[arg-type]


def test_the_lines_scripts_read_and_the_nodes_command() -> None:
    lay = plan(DIR, shards=2, base_port=9000)
    n = lay.node(1, 0)
    assert ready_line(lay) == "cluster up: 2 shard(s), 1 node(s) each, map /c/shards.json"
    assert ready_line(lay).startswith(READY_PREFIX)
    assert node_line(n, 77) == (
        "node shard-1/node-0 serving on 127.0.0.1:9004 (metrics 127.0.0.1:9005, "
        "admin 127.0.0.1:9006, rocketmq 127.0.0.1:9007, pid 77, log /c/shard-1/node-0.log)"
    )
    argv = serve_argv("py", n, lay.map_path)
    assert argv[:4] == ["py", "-m", "delayq.cli.main", "serve"]
    flags = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert flags == {
        "--shard-map": "/c/shards.json",
        "--shard": "1",
        "--data-dir": "/c/shard-1/node-0",
        "--listen": "127.0.0.1:9004",
        "--metrics-listen": "127.0.0.1:9005",
        "--admin-listen": "127.0.0.1:9006",
        "--rocketmq-listen": "127.0.0.1:9007",
        "--log-format": "json",
    }


def test_a_placement_moves_nodes_to_their_host_and_launcher(tmp_path: Path) -> None:
    text = json.dumps({
        "shard-0/node-1": {"host": "10.231.0.12", "launcher": ["ip", "netns", "exec", "n1"]},
    })  # fmt: skip
    lay = plan(tmp_path, shards=1, replicas=3, base_port=9000,
               placement=parse_placement(text))  # fmt: skip
    n0, n1, _ = lay.nodes
    assert (n0.address, n0.local) == ("127.0.0.1:9000", True)
    assert (n1.address, n1.admin_address, n1.launcher) == (
        "10.231.0.12:9004", "10.231.0.12:9006", ("ip", "netns", "exec", "n1")
    )  # fmt: skip
    assert not n1.local and [p for p, _ in lay.local_ports()] == [
        9000,
        9001,
        9002,
        9003,
        9008,
        9009,
        9010,
        9011,
    ]
    entry = lay.entry(0, "node-1", 2)
    assert (entry.master, entry.admin, entry.rocketmq) == (
        "10.231.0.12:9004", "10.231.0.12:9006", "10.231.0.12:9007"
    )  # fmt: skip
    argv = serve_argv("py", n1, lay.map_path)
    assert argv[argv.index("--listen") + 1] == "10.231.0.12:9004"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[]", "an object of node labels"),
        ("{", "not JSON"),
        ('{"shard-0/node-0": {"host": "1.2.3.4:5"}}', "host must be"),
        ('{"shard-0/node-0": {"launcher": "ip netns exec x"}}', "launcher must be a list"),
        ('{"shard-3/node-0": {"host": "10.0.0.1"}}', "names no node of this layout: shard-3"),
    ],
)
def test_a_bad_placement_says_what_is_wrong(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ClusterError, match=says):
        plan(tmp_path, shards=1, replicas=2, placement=parse_placement(text))
    with pytest.raises(ClusterError, match="--tls"):
        plan(tmp_path, replicas=2, tls=True, placement={"shard-0/node-0": Placement()})
