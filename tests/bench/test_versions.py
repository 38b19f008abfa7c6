"""How ``bench.versions`` sums up before/after pairs (pure): each side's median
and the after/before ratio per figure, pair by pair."""

from __future__ import annotations

from bench.versions import summarise


def test_ratios_are_taken_pair_by_pair_not_of_the_medians() -> None:
    pairs = [
        {"before": {"rate": 100}, "after": {"rate": 110}},  # a fast minute: x1.10
        {"before": {"rate": 50}, "after": {"rate": 45}},  # a slow one: x0.90
        {"before": {"rate": 80}, "after": {"rate": 88}},  # x1.10
    ]
    got = summarise(pairs, ["rate"])["rate"]
    assert got["before"] == 80 and got["after"] == 88
    assert got["ratio"]["median"] == 1.1
    assert (got["ratio"]["min"], got["ratio"]["max"]) == (0.9, 1.1)
    assert got["ratio"]["ahead"] == 2 and got["ratio"]["pairs"] == 3


def test_a_figure_one_side_lacks_has_no_ratio_for_that_pair() -> None:
    pairs = [
        {"before": {"rate": 100}, "after": {"rate": 100}},
        {"before": {}, "after": {"rate": 120}},
        {"before": {"rate": 90}, "after": {}},
    ]
    got = summarise(pairs, ["rate"])["rate"]
    assert got["ratio"]["pairs"] == 1 and got["before"] == 90 and got["after"] == 100


def test_a_cost_figure_is_taken_before_over_after_so_above_one_is_better() -> None:
    pairs = [
        {"before": {"us": 10.0}, "after": {"us": 5.0}},  # half the CPU: x2
        {"before": {"us": 8.0}, "after": {"us": 10.0}},  # more: x0.8
        {"before": {"us": 9.0}, "after": {"us": 6.0}},  # x1.5
    ]
    got = summarise(pairs, [], ["us"])["us"]
    assert got["ratio"]["median"] == 1.5 and got["ratio"]["ahead"] == 2
    assert (got["before"], got["after"]) == (9.0, 6.0)


def test_a_figure_given_as_null_counts_as_missing() -> None:
    # bench.engine --big-only writes the phases it skipped as null
    pairs = [
        {"before": {"rate": None, "us": 4.0}, "after": {"rate": None, "us": 2.0}},
        {"before": {"rate": 50, "us": None}, "after": {"rate": 60, "us": None}},
    ]
    got = summarise(pairs, ["rate"], ["us"])
    assert got["rate"]["before"] == 50 and got["rate"]["ratio"]["pairs"] == 1
    assert (got["us"]["before"], got["us"]["after"]) == (4.0, 2.0)
