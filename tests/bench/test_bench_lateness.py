"""The benchmarks' lateness figures (pure): percentiles by rank, -1 when nothing
was delivered, early ones counted."""

from __future__ import annotations

from bench.lateness import lateness_figures, percentile


def test_percentiles_are_values_a_message_measured() -> None:
    ordered = [float(x) for x in range(100)]  # 0..99
    assert [percentile(ordered, q) for q in (0.0, 0.5, 0.99, 1.0)] == [0, 50, 99, 99]
    assert percentile([1.23456], 0.5) == 1.23, "rounded to the hundredth"
    assert percentile([], 0.5) == -1


def test_lateness_figures_name_p50_p99_max_and_the_early_count() -> None:
    got = lateness_figures([-2, -1, 0, 3, 4, 5, 6, 7, 8, 40])
    assert got == {
        "lateness_ms_p50": 5,
        "lateness_ms_p99": 40,
        "lateness_ms_max": 40,
        "early_count": 2,
    }
    assert lateness_figures([])["lateness_ms_max"] == -1
