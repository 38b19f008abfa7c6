"""The comparison goal as ``bench.goal`` checks it on a compare result (pure): which
side is ahead per figure, in how many rounds, and the report's verdict."""

from __future__ import annotations

import pytest
from bench.compare import combine
from bench.goal import Standing, goal_report, standings


def _round(sched: float, deliver: float, p99: float, rss: float) -> dict:
    return {
        "burst": {
            "schedule_msgs_per_s": sched,
            "deliver_msgs_per_s": deliver,
            "lateness_ms_p99": p99,
            "lateness_ms_max": 50.0,  # not a goal figure
            "rss_mb": rss,
        },
        "far": {
            "schedule_msgs_per_s": sched,
            "rss_mb": rss,  # one peak per run: checked once, on the first workload
            "rss_bytes_per_msg": 7.0,  # not a goal figure
            "restart_s": rss / 100,
        },
    }


def _doc(ours: list[dict], peer: list[dict], names: tuple[str, str]) -> dict:
    return {
        "systems": {names[0]: combine(ours), names[1]: combine(peer), "heap": combine(peer)},
        "rounds": {names[0]: ours, names[1]: peer, "heap": peer},
    }


def test_each_goal_figure_counts_the_rounds_ahead_in_and_is_met_on_the_medians() -> None:
    ours = [_round(300, 990, 2.0, 5.0), _round(100, 1000, 9.0, 5.0), _round(200, 985, 3.0, 5.0)]
    peer = [_round(150, 1000, 4.0, 300.0)] * 3
    got = {(s.workload, s.figure): s for s in standings(_doc(ours, peer, ("delayq", "redis")))}
    assert set(got) == {  # no lateness_ms_max; nothing for heap, not a goal peer
        ("burst", "schedule_msgs_per_s"),
        ("burst", "deliver_msgs_per_s"),
        ("burst", "lateness_ms_p99"),
        ("burst", "rss_mb"),
        ("far", "schedule_msgs_per_s"),
        ("far", "restart_s"),
    }
    assert got["burst", "schedule_msgs_per_s"] == Standing(
        "delayq", "redis", "burst", "schedule_msgs_per_s", 200, 150, 2, 3
    )
    assert got["burst", "schedule_msgs_per_s"].met
    # a delivery rate within 1% of the peer's keeps up (both at the arrival rate)
    assert got["burst", "deliver_msgs_per_s"].won == 2
    assert got["burst", "deliver_msgs_per_s"].met
    assert (got["burst", "lateness_ms_p99"].won, got["burst", "lateness_ms_p99"].met) == (2, True)
    assert got["burst", "rss_mb"].won == 3
    assert got["far", "restart_s"].won == 3


def test_the_report_says_met_only_when_every_figure_is_ahead_and_names_the_rest() -> None:
    peer = [_round(150, 1000, 4.0, 300.0)]
    ahead = _doc([_round(200, 1000, 3.0, 5.0)], peer, ("delayq", "rocketmq"))
    assert goal_report(ahead).splitlines()[0] == (
        "goal delayq vs rocketmq: met (ahead in every round on 6 of 6 figures)"
    )
    # behind on the schedule rate (both workloads) and on p99; -1 is "nothing delivered"
    behind = _doc([_round(100, 1000, -1, 5.0)], peer, ("delayq", "rocketmq_100ms"))
    head, *rows = goal_report(behind).splitlines()
    assert head == (
        "goal delayq vs rocketmq_100ms: not met (ahead in every round on 3 of 6 figures); "
        "behind on schedule_msgs_per_s burst, lateness_ms_p99 burst, schedule_msgs_per_s far"
    )
    assert [r.split()[0] for r in rows] == ["NO", "ok", "NO", "ok", "NO", "ok"]
    # the in-process rows are reference rows: no goal
    assert goal_report(_doc([_round(1, 1, 9.0, 9.0)], peer, ("delayq_engine", "rocksdb"))) == ""
    # a peer that delivered nothing is behind whatever the delayq side's p99
    mute_peer = _doc(
        [_round(200, 1000, 30.0, 5.0)], [_round(150, 1000, -1, 300.0)], ("delayq", "redis")
    )
    assert goal_report(mute_peer).startswith("goal delayq vs redis: met ")
    # a one-round document without "rounds" is that round
    assert "ahead in 1/1 rounds" in goal_report({"systems": ahead["systems"]})
    assert goal_report({"systems": {"delayq": combine(peer)}}) == ""  # no peer: nothing to say


def test_rounds_pair_up_only_when_both_sides_ran_as_often() -> None:
    doc = _doc(
        [_round(200, 1000, 3.0, 5.0)] * 2, [_round(150, 1000, 4.0, 300.0)], ("delayq", "redis")
    )
    with pytest.raises(ValueError, match="delayq has 2 rounds, redis 1"):
        standings(doc)


def test_the_rocketmq5_pair_checks_p50_and_early_deliveries_too() -> None:
    def figures(sends: float, p50: float, early: int) -> dict:
        return {
            "uniform": {
                "schedule_msgs_per_s": sends,
                "cancel_msgs_per_s": sends,
                "lateness_ms_p50": p50,
                "lateness_ms_p99": 2 * p50,
                "early_count": early,
                "rss_mb": 100.0,
                "send_ack_ms_p99": 9.0,  # not a goal figure
            }
        }

    doc = {"systems": {"delayq_rmq5": figures(500, 10, 0), "rocketmq5_proxy": figures(900, 60, 0)}}
    got = {s.figure: s.met for s in standings(doc)}
    assert got == {
        "schedule_msgs_per_s": False,
        "cancel_msgs_per_s": False,
        "lateness_ms_p50": True,
        "lateness_ms_p99": True,
        "early_count": True,  # none early on either side is as good as it gets
        "rss_mb": False,  # the same: not lower
    }
    doc["systems"]["delayq_rmq5"] = figures(500, 10, 1)
    assert not {s.figure: s.met for s in standings(doc)}["early_count"]
