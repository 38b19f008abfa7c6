"""The metrics a node serves, pinned: every family's name, type and label names, as
dashboards and alert rules (``charts/delayq/dashboards``, ``charts/delayq/rules``)
and ``docs/operations.md`` read them. A change here is deliberate: change the
table, and whatever reads the family.

A real master with a replica in sync mode (so the replication families appear),
a topic, a consumer group with messages in flight, a push group whose target only
resolves to loopback (refused: the push families appear, nothing is sent), and
calls that end OK and not, scraped over HTTP; Debian's ``promtool check metrics``
lints the text (names, units, ``_total`` counters)."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from delayq import Client, GroupPolicy, Outgoing, PushTarget
from delayq.client import InvalidArgument
from tests.support.servers import ServerProcess

_COUNTERS = [
    "scheduled",
    "delivered",
    "cancelled",
    "rescheduled",
    "rolled",
    "blocks_added",
    "blocked",
    "loaded",
    "blocks_loaded",
    "rolls_avoided",
    "acked",
    "dead_lettered",
    "expired",
    "quarantined",
    "early",
    "checkpoints",
    "state_chunks_retired",
    "stage_failures",
    "checkpoint_failures",
    "released",
    "imported",
    "fsyncs",
    "fsync_seconds",
    "wrong_shard_refusals",
    "failovers",
    "undecodable_requests",
    "schedule_firings",
    "schedule_plans",
    "schedule_missed",
]
_GAUGES = [
    "enqueue_queue",
    "release_buffer",
    "near_rows",
    "scan_lag_slots",
    "key_index_entries",
    "dedup_index_entries",
    "release_lag_seconds",
    "recovery_seconds",
    "data_volume_free_bytes",
    "data_volume_size_bytes",
    "shard",
    "topology_epoch",
    "shards",
    "rebalance_holding",
    "epoch",
    "fenced",
    "delivering",
    "replica_streaming",
    "insync_required",
    "insync_members",
    "insync_live_members",
    "high_water",
    "schedules",
]
# name (as the family is named: counters without _total) -> (type, label names)
PINNED: dict[str, tuple[str, tuple[str, ...]]] = {
    "delayq_open": ("gauge", ()),
    **{f"delayq_{name}": ("counter", ()) for name in _COUNTERS},
    "delayq_congestion_rejections": ("counter", ("reason",)),
    "delayq_key_outcomes": ("counter", ("outcome",)),
    **{f"delayq_{name}": ("gauge", ()) for name in _GAUGES},
    "delayq_pending": ("gauge", ("topic",)),
    "delayq_due_messages": ("gauge", ("topic", "within")),
    "delayq_lateness_seconds": ("histogram", ("le",)),
    "delayq_schedule_lateness_seconds": ("histogram", ("le",)),
    "delayq_data_bytes": ("gauge", ("kind",)),
    "delayq_group_backlog_messages": ("gauge", ("group", "topic")),
    "delayq_group_ready_messages": ("gauge", ("group", "topic")),
    "delayq_group_inflight_messages": ("gauge", ("group", "topic")),
    "delayq_group_oldest_unacked_age_seconds": ("gauge", ("group", "topic")),
    "delayq_group_inflight_limit_messages": ("gauge", ("group", "topic")),
    "delayq_group_waiting_messages": ("gauge", ("group", "topic")),
    "delayq_group_paused": ("gauge", ("group", "topic")),
    "delayq_group_redelivered": ("counter", ("group", "topic")),
    "delayq_group_dead_lettered": ("counter", ("group", "topic")),
    "delayq_group_throttled": ("counter", ("group", "topic")),
    "delayq_group_retries": ("counter", ("attempt", "group", "topic")),
    "delayq_push_requests": ("counter", ("group", "outcome", "target", "topic")),
    "delayq_push_request_duration_seconds": ("histogram", ("group", "le", "target", "topic")),
    "delayq_push_lateness_seconds": ("histogram", ("group", "le", "target", "topic")),
    "delayq_push_in_flight": ("gauge", ("group", "target", "topic")),
    "delayq_push_consecutive_failures": ("gauge", ("group", "target", "topic")),
    "delayq_push_last_success_timestamp_seconds": ("gauge", ("group", "target", "topic")),
    "delayq_push_acks_lost": ("counter", ("group", "target", "topic")),
    "delayq_push_state": ("gauge", ("group", "state", "target", "topic")),
    "delayq_rpc_duration_seconds": ("histogram", ("code", "le", "method", "service")),
    "delayq_gathered_callers": ("counter", ("call",)),
    "delayq_gathered_batches": ("counter", ("call",)),
    "delayq_role": ("gauge", ("role",)),
    "delayq_replication_mode": ("gauge", ("mode",)),
    "delayq_replication_lag_bytes": ("gauge", ("replica",)),
    "delayq_replication_lag_seconds": ("gauge", ("replica",)),
    "delayq_replica_connected": ("gauge", ("replica",)),
    "process_virtual_memory_bytes": ("gauge", ()),
    "process_resident_memory_bytes": ("gauge", ()),
    "process_start_time_seconds": ("gauge", ()),
    "process_cpu_seconds": ("counter", ()),
    "process_open_fds": ("gauge", ()),
    "process_max_fds": ("gauge", ()),
}
_REFUSED_URL = "http://localhost:9/hook?token=never-shown"
CONDITIONAL: dict[str, tuple[str, tuple[str, ...]]] = {
    # a promotion this process took; a lease a control plane keeps (neither here)
    "delayq_last_failover_timestamp_seconds": ("gauge", ()),
    "delayq_lease_remaining_seconds": ("gauge", ()),
}


def _families(address: str) -> tuple[str, dict[str, tuple[str, set[str]]]]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, tuple[str, set[str]]] = {}
    for fam in text_string_to_metric_families(text):
        labels = {k for s in fam.samples for k in s.labels}
        out[fam.name] = (fam.type, labels)
    return text, out


def _sampled(text: str, name: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no sample {name}{labels}")


def test_a_master_with_a_replica_serves_the_pinned_families(tmp_path: Path) -> None:
    master = ServerProcess(
        tmp_path / "m", ["--replication", "sync", "--min-insync", "2", "--node-name", "m"]
    ).start()
    try:
        replica = ServerProcess(
            tmp_path / "r", ["--follow", master.admin_address, "--node-name", "r"]
        ).start()
        try:
            with Client(master.address) as c:
                deadline = time.monotonic() + 30
                while True:  # the first sync ack waits for the replica to join
                    try:
                        c.schedule_many([Outgoing(topic="t", body=b"x", delay=0)] * 4)
                        break
                    except Exception:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
                c.schedule("t", b"later", delay=600)
                got: list[object] = []
                while len(got) < 2 and time.monotonic() < deadline:
                    got += c.receive("t", "g", max_messages=2 - len(got), wait_s=1)
                c.set_group_policy("t", "p", GroupPolicy(max_in_flight=7))
                c.pause_group("t", "p")
                # a group at a rate of 1/s (burst 1) asking for 3 of the 4 ready: cut short
                c.set_group_policy("t", "r", GroupPolicy(rate_per_s=1, burst=1))
                assert 1 <= len(c.receive("t", "r", max_messages=3, wait_s=0)) < 3
                with pytest.raises(InvalidArgument):  # (packed, one topic for all: refused whole)
                    c.schedule_many([Outgoing(topic="", body=b"no topic")] * 2)
                # a name that resolves to loopback, no --push-allow: refused at connect
                c.set_group_policy("t", "h", GroupPolicy(push=PushTarget(url=_REFUSED_URL)))
            deadline = time.monotonic() + 30
            while True:  # the pusher starts, takes a ready message, is refused
                text, families = _families(master.metrics_address())
                try:
                    refused = _sampled(text, "delayq_push_state", group="h", state="refused")
                except AssertionError:
                    refused = 0
                if refused == 1:
                    break
                assert time.monotonic() < deadline, "the push group never showed refused"
                time.sleep(0.2)
            _, on_replica = _families(replica.metrics_address())
            # the pause is replicated: the replica reports it too (what lets the paused
            # alert outlast its master's restart)
            deadline = time.monotonic() + 30
            while (
                _sampled(
                    _families(replica.metrics_address())[0],
                    "delayq_group_paused",
                    topic="t",
                    group="p",
                )
                != 1
            ):
                assert time.monotonic() < deadline, "the replica never reported the pause"
                time.sleep(0.2)
        finally:
            replica.stop()
    finally:
        master.stop()

    served = {n: (t, tuple(sorted(ls))) for n, (t, ls) in families.items()}
    missing = sorted(set(PINNED) - set(served))
    unknown = sorted(set(served) - set(PINNED) - set(CONDITIONAL))
    assert not missing and not unknown, f"missing {missing}, not pinned {unknown}"
    for name, want in {**PINNED, **CONDITIONAL}.items():
        if name in served:
            assert served[name] == want, name
    assert set(on_replica) <= set(PINNED) | set(CONDITIONAL)
    assert on_replica["delayq_role"] == ("gauge", {"role"})

    # the values say what they name
    assert _sampled(text, "delayq_role", role="master") == 1
    assert _sampled(text, "delayq_replication_mode", mode="sync") == 1
    assert _sampled(text, "delayq_insync_required") == 2
    assert _sampled(text, "delayq_insync_live_members") == 2
    assert _sampled(text, "delayq_pending", topic="t") == 1
    assert _sampled(text, "delayq_due_messages", topic="t", within="1m") == 0
    assert _sampled(text, "delayq_due_messages", topic="t", within="1h") == 1
    assert _sampled(text, "delayq_group_inflight_messages", topic="t", group="g") == 2
    assert _sampled(text, "delayq_group_ready_messages", topic="t", group="g") == 2
    assert _sampled(text, "delayq_group_backlog_messages", topic="t", group="g") == 4
    assert _sampled(text, "delayq_group_oldest_unacked_age_seconds", topic="t", group="g") > 0
    assert _sampled(text, "delayq_group_paused", topic="t", group="p") == 1
    assert _sampled(text, "delayq_group_inflight_limit_messages", topic="t", group="p") == 7
    assert _sampled(text, "delayq_group_paused", topic="t", group="r") == 0
    assert _sampled(text, "delayq_group_throttled_total", topic="t", group="r") >= 1
    assert _sampled(text, "delayq_group_throttled_total", topic="t", group="g") == 0
    assert _sampled(text, "delayq_group_retries_total", topic="t", group="g", attempt="8+") == 0
    assert _sampled(text, "delayq_lateness_seconds_count") == 4
    push = {"topic": "t", "group": "h", "target": "http://localhost:9"}
    assert _sampled(text, "delayq_push_requests_total", **push, outcome="refused") >= 1
    assert _sampled(text, "delayq_push_requests_total", **push, outcome="2xx") == 0
    assert _sampled(text, "delayq_push_state", **push, state="pushing") == 0
    assert _sampled(text, "delayq_push_last_success_timestamp_seconds", **push) == 0
    assert "delayq_push_state" not in on_replica  # only the master pushes
    assert "never-shown" not in text and "/hook" not in text  # the origin alone
    rpc = "delayq_rpc_duration_seconds_count"
    assert _sampled(text, rpc, method="Schedule", code="INVALID_ARGUMENT") == 1
    assert _sampled(text, rpc, method="Schedule", code="OK") >= 2
    assert _sampled(text, "delayq_replica_connected", replica="r") == 1
    assert _sampled(text, "delayq_data_bytes", kind="commitlog") > 0
    assert _sampled(text, "delayq_data_volume_free_bytes") > 0

    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: run `make system-deps` (Debian's prometheus package)"
    lint = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
