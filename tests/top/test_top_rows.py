"""``delayq top``'s pure parts, without sockets: samples made into frames
(``top.rows``), frames into text and key presses into views (``top.screen``)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from delayq.client.results import (
    DueBucket,
    GroupPolicy,
    GroupStats,
    NodeStats,
    PushStats,
    ScheduleStats,
    ShardStats,
    TopicStats,
)
from delayq.control.views import Answer, Replica
from delayq.role import Role
from delayq.top.rows import SORTS, Frame, due_soon, frame, order, to_json
from delayq.top.samples import NodeSample, Sample
from delayq.top.screen import HELP, KEYS, View, lines, on_key, screen

WALL_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def topic(
    name: str,
    pending: int = 0,
    delivered: int = 0,
    *,
    due: tuple[tuple[int, int], ...] = (),
    backlog: dict[str, int] | None = None,
    dead: dict[str, int] | None = None,
    cancelled: int = 0,
    groups: tuple[GroupStats, ...] = (),
) -> TopicStats:
    return TopicStats(
        name,
        pending,
        delivered,
        cancelled,
        backlog or {},
        tuple(DueBucket(w, c) for w, c in due),
        dead or {},
        groups,
    )


def delivery(
    group: str,
    *,
    paused: bool = False,
    in_flight: int = 0,
    limit: int = 0,
    throttled: int = 0,
    retries: int = 0,
    push: PushStats | None = None,
) -> GroupStats:
    """One shard's ``GroupStats`` of ``group`` (its policy the defaults)."""
    policy = GroupPolicy(paused=paused)
    return GroupStats(
        group, policy, paused, paused, in_flight, limit, 0, {}, 0, throttled, retries, push
    )


def pushing(ok: int, failing: int = 0, last_ok_ms: int = 0) -> PushStats:
    """A pusher's figures: ``ok`` 2xx answers, ``failing`` failures in a row."""
    return PushStats(
        target="https://hooks.example.com:443",
        state="pushing" if not failing else "backing_off",
        requests={"2xx": ok, "5xx": failing},
        in_flight=0,
        consecutive_failures=failing,
        last_success_ms=last_ok_ms,
        not_before_ms=0,
        acks_lost=0,
        latency_ms_p50=0,
        latency_ms_p99=0,
        lateness_ms_p50=0,
        lateness_ms_p99=0,
    )


def stats(
    shard: int, role: str, *topics: TopicStats, p99: int = 0, end: int = 0, epoch: int = 1
) -> ShardStats:
    node = NodeStats(shard, epoch, role, end, 1, f"a{shard}")
    return ShardStats(tuple(topics), p99 // 2, p99, 0, node)


def node(
    shard: int,
    k: int,
    *topics: TopicStats,
    role: str | None = None,
    state: str = "serving",
    admin: Answer | None = None,
    p99: int = 0,
    end: int = 0,
    named: bool = True,
) -> NodeSample:
    """Node ``node-K`` of ``shard`` at address ``h:SK``; node 0 the map's master."""
    map_role = Role.MASTER if k == 0 else Role.REPLICA
    said = role or map_role
    return NodeSample(
        shard=shard,
        address=f"h:{shard}{k}",
        name=f"node-{k}" if named else "",
        map_role=map_role,
        map_epoch=1,
        state=state,
        stats=stats(shard, said, *topics, p99=p99, end=end) if state == "serving" else None,
        admin=admin,
    )


def sample(*nodes: NodeSample, at_s: float = 100.0, error: str = "") -> Sample:
    return Sample(
        source="dir /c",
        at_s=at_s,
        wall_ms=WALL_MS + round(at_s * 1000),
        took_ms=7,
        topology_epoch=1,
        nodes=nodes,
        error=error,
    )


def master_answer(
    name: str = "node-0", insync: tuple[str, ...] = ("node-0", "node-1"), **replicas: Replica
) -> Answer:
    return Answer(
        name=name,
        role=Role.MASTER,
        epoch=1,
        log_end=1000,
        insync=frozenset(insync),
        replicas=tuple(replicas.values()),
    )


def test_due_next_minute_is_the_overdue_bucket_and_those_up_to_60s() -> None:
    t = topic("t", due=((0, 3), (60_000, 4), (300_000, 5), (-1, 6)))
    assert due_soon([t]) == 7
    assert due_soon([t, topic("u", due=((0, 1),))]) == 8
    assert due_soon([]) == 0


def test_a_node_row_sums_its_topics_and_rates_come_from_the_previous_sample() -> None:
    t0 = (topic("a", 5, 100, due=((0, 1), (60_000, 2))), topic("b", 7, 10, due=((-1, 7),)))
    t1 = (topic("a", 4, 130, due=((60_000, 2),)), topic("b", 7, 20, due=((-1, 7),)))
    first = sample(node(0, 0, *t0, p99=12), at_s=100.0)
    second = sample(node(0, 0, *t1, p99=20), at_s=102.0)

    (row,) = frame(first).nodes
    assert (row.pending, row.due_next_minute, row.delivered, row.delivered_per_s) == (
        12,
        3,
        110,
        None,
    )
    (row,) = frame(second, first).nodes
    assert (row.pending, row.due_next_minute, row.delivered) == (11, 2, 150)
    assert row.delivered_per_s == pytest.approx(20.0)  # (150 - 110) / 2 s
    assert (row.lateness_p50_ms, row.lateness_p99_ms) == (10, 20)
    assert frame(second, first).elapsed_s == pytest.approx(2.0)


def test_no_rate_when_a_counter_fell_or_the_node_did_not_answer_before() -> None:
    before = sample(node(0, 0, topic("a", 0, 500)), at_s=1.0)
    after = sample(node(0, 0, topic("a", 0, 3)), at_s=2.0)  # restarted: counts from its log
    assert frame(after, before).nodes[0].delivered_per_s is None
    assert frame(after, before).topics[0].delivered_per_s is None
    down = sample(node(0, 0, state="down"), at_s=1.0)
    assert frame(after, down).nodes[0].delivered_per_s is None
    assert frame(after, after).nodes[0].delivered_per_s is None  # no time between: no rate


def test_a_node_that_is_down_is_a_row_of_unknowns_and_not_counted() -> None:
    cur = sample(
        node(0, 0, topic("a", 5), admin=master_answer()),
        node(0, 1, state="down"),
        node(1, 0, state="down"),
    )
    f = frame(cur)
    down = f.nodes[1]
    assert (down.node, down.role, down.epoch, down.state) == ("node-1", "replica", 1, "down")
    assert (down.pending, down.delivered_per_s, down.lateness_p99_ms, down.lag_bytes) == (
        None,
        None,
        None,
        None,
    )
    assert down.insync is True  # the master still counts it
    assert f.nodes[2].state == "down" and f.nodes[2].pending is None
    assert (f.shards, f.shards_answering, f.nodes_answering) == (2, 1, 1)
    assert [(t.topic, t.pending) for t in f.topics] == [("a", 5)]
    text = "\n".join(lines(f))
    assert "(without 1 of 2 shard(s): no master answered)" in text


def test_replica_lag_and_in_sync_come_from_the_masters_answer_by_name() -> None:
    answer = master_answer(
        insync=("node-0", "node-1"),
        a=Replica(name="node-1", lag_bytes=0, lag_ms=0, insync=True),
        b=Replica(name="node-2", lag_bytes=4096, lag_ms=350),
    )
    f = frame(
        sample(
            node(0, 0, admin=answer),
            node(0, 1, end=1000),
            node(0, 2, end=600),
        )
    )
    master, r1, r2 = f.nodes
    assert (master.lag_bytes, master.insync, master.insync_set) == (0, True, ("node-0", "node-1"))
    assert (r1.lag_bytes, r1.lag_ms, r1.insync) == (0, 0, True)
    assert (r2.lag_bytes, r2.lag_ms, r2.insync) == (4096, 350, False)
    assert [r.log_end for r in f.nodes] == [1000, 1000, 600]


def test_a_replica_known_by_address_only_gets_lag_from_log_ends_and_no_in_sync_guess() -> None:
    answer = master_answer(a=Replica(name="node-1", lag_bytes=9, lag_ms=9))
    f = frame(sample(node(0, 0, admin=answer), node(0, 1, end=700, named=False)))
    replica = f.nodes[1]
    assert replica.node == "h:01"  # its address stands for its name
    assert (replica.lag_bytes, replica.lag_ms, replica.insync) == (300, None, None)
    without_admin = frame(sample(node(0, 0, end=1000), node(0, 1, end=400)))
    assert (without_admin.nodes[1].lag_bytes, without_admin.nodes[1].insync) == (600, None)
    assert without_admin.nodes[0].insync is None and without_admin.nodes[0].insync_set == ()


def test_the_sections_sum_masters_only_and_their_rates_over_comparable_shards() -> None:
    def cluster(at_s: float, d0: int, d1: int) -> Sample:
        return sample(
            node(0, 0, topic("a", 10, d0, backlog={"g": 2}, dead={"g": 1}, cancelled=1)),
            node(0, 1, topic("a", 10, d0, backlog={"g": 2})),  # a replica: not counted
            node(1, 0, topic("a", 5, d1, backlog={"g": 3, "h": 1}), topic("b", 1, 0)),
            node(1, 1, topic("a", 5, d1)),
            at_s=at_s,
        )

    before, after = cluster(10.0, 100, 50), cluster(11.0, 130, 60)
    f = frame(after, before)
    a, b = f.topics
    assert (a.topic, a.pending, a.delivered, a.cancelled, a.delivered_per_s) == (
        "a",
        15,
        190,
        1,
        pytest.approx(40.0),  # (130 - 100) + (60 - 50) in 1 s
    )
    assert (b.topic, b.pending, b.delivered_per_s) == ("b", 1, 0.0)
    assert [(g.topic, g.group, g.backlog, g.dead_lettered) for g in f.groups] == [
        ("a", "g", 5, 1),
        ("a", "h", 1, 0),
    ]
    assert f.shards_answering == 2
    failed_over = sample(  # shard 1's master is another node now: its counts start anew
        *after.nodes[:2],
        node(1, 0, state="down"),
        node(1, 1, topic("a", 5, 60), role=Role.MASTER),
        at_s=11.0,
    )
    assert [(t.topic, t.delivered_per_s) for t in frame(failed_over, before).topics] == [
        ("a", None)
    ]


def test_the_master_of_a_shard_is_the_node_that_answers_as_one_at_the_highest_epoch() -> None:
    fenced = Answer(name="node-0", role=Role.MASTER, epoch=1, fenced=True)
    promoted = Answer(name="node-1", role=Role.MASTER, epoch=2, insync=frozenset({"node-1"}))
    f = frame(
        sample(
            node(0, 0, topic("a", 1), admin=fenced),
            node(0, 1, topic("a", 9), role=Role.MASTER, admin=promoted),
        )
    )
    old, new = f.nodes
    assert (old.role, old.fenced, old.epoch) == ("master", True, 1)
    assert (new.role, new.epoch, new.insync_set) == ("master", 2, ("node-1",))
    assert [t.pending for t in f.topics] == [9]  # the promoted one's figures
    assert "fenced" in lines(f)[3]


def three_shards() -> Frame:
    """Pending 5, 70, 10 by shard (topic x only on shard 1), delivered/s 3, 1, 2,
    lateness p99 1, 2, 50 ms; shard 2's replica down."""
    before = sample(
        node(0, 0, topic("t", 5, 0), p99=1),
        node(1, 0, topic("t", 20, 0), topic("x", 50, 0), p99=2),
        node(2, 0, topic("t", 10, 0), p99=50),
        node(2, 1, state="down"),
        at_s=1.0,
    )
    after = sample(
        node(0, 0, topic("t", 5, 3), p99=1),
        node(1, 0, topic("t", 20, 1), topic("x", 50, 0), p99=2),
        node(2, 0, topic("t", 10, 2), p99=50),
        node(2, 1, state="down"),
        at_s=2.0,
    )
    return frame(after, before)


def test_sorting_orders_nodes_topics_and_groups_highest_first_unknown_last() -> None:
    f = three_shards()
    assert f.sort == "name"
    assert [(r.shard, r.node) for r in f.nodes] == [
        (0, "node-0"), (1, "node-0"), (2, "node-0"), (2, "node-1")
    ]  # fmt: skip
    assert [r.shard for r in order(f, "pending").nodes] == [1, 2, 0, 2]
    assert order(f, "pending").nodes[-1].state == "down"
    assert [r.shard for r in order(f, "delivered").nodes] == [0, 2, 1, 2]
    assert [r.shard for r in order(f, "lateness").nodes] == [2, 1, 0, 2]
    assert [t.topic for t in order(f, "pending").topics] == ["x", "t"]
    assert [t.topic for t in order(f, "delivered").topics] == ["t", "x"]
    assert [t.topic for t in order(f, "lateness").topics] == ["t", "x"]  # (by name)
    with pytest.raises(ValueError, match="sort: one of name, pending, delivered, lateness"):
        order(f, "size")


def test_the_json_document_has_the_documented_keys_and_numbers() -> None:
    doc = json.loads(json.dumps(to_json(order(three_shards(), "pending"))))
    assert set(doc) == {
        "source", "sampled_ms", "took_ms", "elapsed_s", "topology_epoch", "shards",
        "shards_answering", "nodes_answering", "sort", "error", "nodes", "topics", "groups",
        "schedules",
    }  # fmt: skip
    assert (doc["shards"], doc["shards_answering"], doc["sort"]) == (3, 3, "pending")
    assert doc["elapsed_s"] == pytest.approx(1.0) and doc["sampled_ms"] == WALL_MS + 2000
    first = doc["nodes"][0]
    assert set(first) == {
        "shard", "node", "address", "role", "epoch", "state", "fenced", "pending",
        "due_next_minute", "delivered", "delivered_per_s", "lateness_p50_ms",
        "lateness_p99_ms", "log_end", "lag_bytes", "lag_ms", "insync", "insync_set",
    }  # fmt: skip
    assert (first["shard"], first["pending"], first["delivered"]) == (1, 70, 1)
    assert first["delivered_per_s"] == pytest.approx(1.0)
    assert doc["nodes"][-1]["pending"] is None and doc["nodes"][-1]["state"] == "down"
    assert set(doc["topics"][0]) == {
        "topic", "pending", "due_next_minute", "delivered", "delivered_per_s", "cancelled",
    }  # fmt: skip
    assert doc["groups"] == []
    assert doc["schedules"] == {
        "schedules": 0, "fired_per_s": 0.0, "missed": 0, "lateness_p99_ms": 0,
    }  # fmt: skip


def test_the_text_has_a_title_a_row_a_node_and_the_sections() -> None:
    f = three_shards()
    text = lines(f)
    assert text[0].startswith("delayq top - dir /c  topology epoch 1  3 shard(s), 3/4 node(s)")
    assert "sort: shard, node  00:00:02Z (7 ms)" in text[0]
    assert text[2].split() == [
        "SHARD", "NODE", "ROLE", "EPOCH", "STATE", "PENDING", "DUE<1M", "DELIV/S", "P99",
        "LAG", "LAG_MS", "INSYNC", "ADDRESS",
    ]  # fmt: skip
    assert text[3].split() == [
        "0", "node-0", "master", "1", "serving", "5", "0", "3.0", "1ms", "0B", "0ms", "-", "h:00",
    ]  # fmt: skip
    assert text[6].split() == ["2", "node-1", "replica", "1", "down", *["-"] * 7, "h:21"]
    assert text[8].split() == ["TOPIC", "PENDING", "DUE<1M", "DELIVERED", "DELIV/S", "CANCELLED"]
    assert text[9].split() == ["t", "35", "0", "6", "6.0", "0"]
    assert text[-1] == "(no consumer groups)"
    with_error = lines(frame(sample(error="GetRoute of x: UNAVAILABLE")))
    assert with_error[1] == "! GetRoute of x: UNAVAILABLE"
    assert "(no topics)" in with_error
    assert not [line for line in text if "recurring schedules" in line], "none held: no line"


def test_the_screen_fits_the_terminal_and_ends_with_the_keys() -> None:
    f = three_shards()
    whole = lines(f)
    tall = screen(f, View(), 200, 40)
    assert len(tall) == 40 and tall[: len(whole)] == whole and tall[-1] == KEYS
    assert set(tall[len(whole) : -1]) == {""}
    narrow = screen(f, View(help=True), 30, 8)
    assert len(narrow) == 8 and all(len(line) <= 30 for line in narrow)
    assert narrow[-1] == HELP[:30]
    assert narrow[-2].startswith("... ") and narrow[0] == whole[0][:30]
    assert len(whole) - 6 == int(narrow[-2].split()[1])  # 6 lines shown of the frame
    assert screen(f, View(), 80, 1) == [KEYS]
    assert screen(f, View(), 0, 10) == []


def test_keys_quit_sort_and_toggle_help() -> None:
    v = View()
    assert on_key(v, "q").quit and on_key(v, "Q").quit
    cycled = [v.sort]
    for _ in SORTS:
        v = on_key(v, "s")
        cycled.append(v.sort)
    assert cycled == [*SORTS, SORTS[0]]
    assert on_key(View(), "S").sort == SORTS[-1]
    assert [on_key(View(), k).sort for k in "npdl"] == ["name", "pending", "delivered", "lateness"]
    assert on_key(View(), "?").help and not on_key(on_key(View(), "?"), "?").help
    assert on_key(View(sort="pending"), "x") == View(sort="pending")


def test_a_group_row_shows_its_pause_in_flight_against_its_limit_and_its_rates() -> None:
    def cluster(at_s: float, throttled: int, retries: int, paused_1: bool) -> Sample:
        return sample(
            node(
                0,
                0,
                topic(
                    "a",
                    backlog={"g": 5},
                    groups=(
                        delivery("g", paused=True, in_flight=4, limit=10, throttled=throttled),
                    ),
                ),
            ),
            node(
                0,
                1,
                topic(
                    "a",
                    backlog={"g": 5},
                    groups=(  # a replica: not counted
                        delivery("g", paused=True, in_flight=99, limit=10, throttled=999),
                    ),
                ),
            ),
            node(
                1,
                0,
                topic(
                    "a",
                    backlog={"g": 2, "h": 1},
                    groups=(
                        delivery("g", paused=paused_1, in_flight=3, limit=10, retries=retries),
                    ),
                ),
            ),
            at_s=at_s,
        )

    before = cluster(10.0, throttled=100, retries=7, paused_1=True)
    first = frame(before)
    g, h = first.groups
    assert (g.shards, g.paused_shards, g.in_flight, g.in_flight_limit) == (2, 2, 7, 20)
    assert (g.throttled_per_s, g.retries_per_s) == (None, None)  # nothing to compare yet
    # a group with a backlog and no delivery figures: none known
    assert (h.group, h.backlog, h.shards, h.throttled_per_s) == ("h", 1, 0, None)

    after = cluster(12.0, throttled=130, retries=8, paused_1=False)
    g, _ = frame(after, before).groups
    assert (g.paused_shards, g.shards) == (1, 2)  # shard 1 resumed: they disagree
    assert g.throttled_per_s == pytest.approx(15.0)  # (130 - 100) in 2 s
    assert g.retries_per_s == pytest.approx(0.5)
    text = lines(frame(after, before))
    head = next(i for i, line in enumerate(text) if line.startswith("TOPIC  GROUP"))
    assert text[head].split() == [
        "TOPIC",
        "GROUP",
        "BACKLOG",
        "PAUSED",
        "IN_FLIGHT",
        "THR/S",
        "RETRY/S",
        "DEAD_LETTERED",
        "PUSH/S",
        "FAIL",
        "LAST-OK",
    ]
    no_push = ["-", "-", "-"]  # a pull group
    assert text[head + 1].split() == ["a", "g", "7", "1/2", "7/20", "15.0", "0.5", "0", *no_push]
    assert text[head + 2].split() == ["a", "h", "1", "-", "-", "-", "-", "0", *no_push]
    assert lines(first)[head + 1].split()[3:7] == ["yes", "7/20", "-", "-"]

    restarted = cluster(12.0, throttled=5, retries=8, paused_1=True)  # a counter fell
    g, _ = frame(restarted, before).groups
    assert (g.throttled_per_s, g.retries_per_s) == (None, pytest.approx(0.5))
    failed_over = sample(  # shard 1's master is another node now: its counts start anew
        before.nodes[0],
        node(1, 0, state="down"),
        node(1, 1, topic("a", groups=(delivery("g", retries=9),)), role=Role.MASTER),
        at_s=12.0,
    )
    g, *_ = frame(failed_over, before).groups
    assert (g.throttled_per_s, g.retries_per_s) == (None, None)
    doc = to_json(frame(after, before))
    assert doc["groups"][0] == {
        "topic": "a",
        "group": "g",
        "backlog": 7,
        "dead_lettered": 0,
        "shards": 2,
        "paused_shards": 1,
        "in_flight": 7,
        "in_flight_limit": 20,
        "throttled_per_s": pytest.approx(15.0),
        "retries_per_s": pytest.approx(0.5),
        "pushes_per_s": None,
        "push_failing": None,
        "push_ok_age_s": None,
    }


def test_a_push_group_row_shows_its_pushes_failures_and_last_success() -> None:
    def cluster(at_s: float, ok_0: int, ok_1: int, failing_1: int) -> Sample:
        wall = WALL_MS + round(at_s * 1000)
        return sample(
            node(0, 0, topic("a", backlog={"p": 1},
                             groups=(delivery("p", push=pushing(ok_0, 0, wall - 3_000)),))),
            node(1, 0, topic("a", backlog={"p": 2},
                             groups=(delivery("p", push=pushing(ok_1, failing_1, 0)),))),
            at_s=at_s,
        )  # fmt: skip

    before = cluster(10.0, ok_0=100, ok_1=0, failing_1=2)
    (g,) = frame(before).groups
    # nothing to compare yet; shard 1 never had a 2xx, shard 0 3 s ago
    assert (g.pushes_per_s, g.push_failing, g.push_ok_age_s) == (None, 2, 3.0)
    (g,) = frame(cluster(12.0, ok_0=150, ok_1=10, failing_1=7), before).groups
    assert g.pushes_per_s == pytest.approx(30.0)  # (50 + 10) in 2 s
    assert g.push_failing == 7  # the worst shard
    text = lines(frame(cluster(12.0, ok_0=150, ok_1=10, failing_1=7), before))
    head = next(i for i, line in enumerate(text) if line.startswith("TOPIC  GROUP"))
    assert text[head + 1].split()[-3:] == ["30.0", "7", "3s"]
    never = sample(node(0, 0, topic("a", groups=(delivery("p", push=pushing(0, 9, 0)),))))
    (g,) = frame(never).groups
    assert (g.push_failing, g.push_ok_age_s) == (9, None)


def test_the_recurring_schedules_line_sums_the_masters_and_rates_their_firings() -> None:
    def shard(n: int, fired: int, missed: int, p99: int) -> NodeSample:
        sampled = node(n, 0)
        assert sampled.stats is not None
        held = ScheduleStats(10 * (n + 1), fired, missed, 0, p99)
        with_schedules = dataclasses.replace(sampled.stats, schedules=held)
        return dataclasses.replace(sampled, stats=with_schedules)

    first = sample(shard(0, 30, 0, 0), shard(1, 60, 2, 0), at_s=100.0)
    second = sample(shard(0, 40, 0, 0), shard(1, 70, 3, 250), at_s=102.0)
    assert frame(first).schedules.fired_per_s is None, "the first frame: no rate"
    f = frame(second, first)
    assert (f.schedules.schedules, f.schedules.missed, f.schedules.lateness_p99_ms) == (30, 3, 250)
    assert f.schedules.fired_per_s == pytest.approx(10.0)  # 5/s on each shard
    assert lines(f)[-2:] == [
        "",
        "recurring schedules 30: 10.0 fired/s, 3 missed, firing lateness p99 250ms",
    ]
    restarted = sample(shard(0, 40, 0, 0), shard(1, 5, 0, 0), at_s=102.0)
    assert frame(restarted, first).schedules.fired_per_s is None, "a counter fell"
