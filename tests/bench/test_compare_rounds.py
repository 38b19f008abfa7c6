"""How ``bench.compare`` folds rounds (``--rounds``), saved runs (``--merge``) and
lateness CDFs into one result, and what the lateness plot draws (pure)."""

from __future__ import annotations

import pytest
from bench.compare import CDF_QUANTILES, combine, lateness_points, merge_runs


def test_rounds_give_medians_worst_counts_and_none_where_a_round_lacks_a_figure() -> None:
    def round_(rate: float, p99: float, peak: float, lost: int, restart: float | None) -> dict:
        return {
            "uniform": {
                "schedule_msgs_per_s": rate,
                "lateness_ms_p99": p99,
                "lateness_ms_max": peak,
                "lost": lost,
                "early_count": 0,
            },
            "far": {"restart_s": restart},
        }

    rounds = [
        round_(100, 2.0, 9.0, 0, 0.5),
        round_(300, 1.0, 4.0, 2, 0.4),
        round_(200, 3.0, 5.0, 0, None),
    ]
    got = combine(rounds)
    assert got["uniform"] == {
        "schedule_msgs_per_s": 200,  # the median, not the mean
        "lateness_ms_p99": 2.0,
        "lateness_ms_max": 9.0,  # the worst round's maximum
        "lost": 2,  # a loss in any round shows
        "early_count": 0,
    }
    assert got["far"] == {"restart_s": None}
    # an even count takes the lower middle value: one a round really measured
    assert combine(rounds[:2])["uniform"]["schedule_msgs_per_s"] == 100
    assert combine(rounds[1:2]) == rounds[1]


def test_a_lateness_cdf_folds_point_by_point_and_old_results_still_plot() -> None:
    rounds = [
        {"uniform": {"lateness_ms_cdf": [0.1, 0.5, 9.0], "lateness_ms_max": 9.0}},
        {"uniform": {"lateness_ms_cdf": [0.3, 0.4, 2.0], "lateness_ms_max": 2.0}},
        {"uniform": {"lateness_ms_cdf": [0.2, 0.6, 3.0], "lateness_ms_max": 3.0}},
    ]
    # the median round at each fraction (not one round's curve, not a mean)
    assert combine(rounds)["uniform"]["lateness_ms_cdf"] == [0.2, 0.5, 3.0]
    assert combine(rounds)["uniform"]["lateness_ms_max"] == 9.0
    cdf = [float(i) for i in range(len(CDF_QUANTILES))]
    assert lateness_points({"lateness_ms_cdf": cdf}) == list(zip(CDF_QUANTILES, cdf, strict=True))
    # results saved before the CDF was sampled: their three points; -1 is "none seen"
    old = {"lateness_ms_p50": 0.5, "lateness_ms_p99": 1.5, "lateness_ms_max": -1}
    assert lateness_points(old) == [(0.5, 0.5), (0.99, 1.5)]


def test_saved_runs_merge_into_one_as_if_they_were_one_run() -> None:
    def run(*rates: int) -> dict:
        rounds = [{"uniform": {"schedule_msgs_per_s": r, "lost": int(r == 200)}} for r in rates]
        doc = {"systems": {"delayq": combine(rounds)}, "sizes": {"uniform": 10}}
        if len(rounds) > 1:
            doc["rounds"] = {"delayq": rounds}
        if rates[0] != 200:  # runs saved before the machine's pace was kept have none
            doc["loop_ms"] = {"delayq": [[r / 2, r / 2 + 1] for r in rates]}
        return doc

    merged = merge_runs([run(100, 400), run(200), run(300, 500)])
    assert [r["uniform"]["schedule_msgs_per_s"] for r in merged["rounds"]["delayq"]] == [
        100,
        400,
        200,  # a run of one round has no "rounds": its figures are that round
        300,
        500,
    ]
    assert merged["systems"]["delayq"]["uniform"] == {"schedule_msgs_per_s": 300, "lost": 1}
    assert merged["sizes"] == {"uniform": 10}
    assert merged["loop_ms"] == {"delayq": [[50, 51], [200, 201], [150, 151], [250, 251]]}
    other_sizes = {**run(100), "sizes": {"uniform": 20}}
    with pytest.raises(ValueError, match="run 2 has sizes"):
        merge_runs([run(100), other_sizes])
    other_systems = {**run(100), "systems": {"redis": run(100)["systems"]["delayq"]}}
    with pytest.raises(ValueError, match=r"run 2 has systems \['redis'\]"):
        merge_runs([run(100), other_systems])
    with pytest.raises(ValueError, match=r"b\.json is not a bench\.compare --json document"):
        merge_runs([run(100), {"sizes": {"uniform": 10}}], ["a.json", "b.json"])
