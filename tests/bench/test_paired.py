"""How ``bench.paired`` sums up its trials (pure): per figure, each system's median
rate and the A/B ratios over all pairs and over the calm ones."""

from __future__ import annotations

from typing import Any

import pytest
from bench.paired import FIGURES, pooled, ratio_summary, summarise, table


def _trial(pace: float, a_rate: float, b_rate: float) -> dict[str, Any]:
    figures = {"schedule_msgs_per_s": 0.0, "cancel_msgs_per_s": 0.0}
    phases = {phase: {"a": dict(figures), "b": dict(figures)} for phase, _ in FIGURES}
    for phase, fig in FIGURES:
        phases[phase]["a"][fig], phases[phase]["b"][fig] = a_rate, b_rate
    return {"loop_ms": pace, "first": "a", "phases": phases}


def test_ratio_summary_takes_the_lower_middle_and_counts_pairs_ahead() -> None:
    assert ratio_summary([1.5, 0.5, 2.0, 0.8]) == {
        "median": 0.8,  # a ratio some pair measured, never a mean of two
        "min": 0.5,
        "max": 2.0,
        "ahead": 2,
        "pairs": 4,
    }
    assert ratio_summary([1.0])["ahead"] == 0  # type: ignore[index]  # a tie is not ahead
    assert ratio_summary([]) is None


def test_summary_splits_calm_pairs_from_loaded_ones() -> None:
    trials = [_trial(110, 300, 200), _trial(250, 100, 200), _trial(120, 150, 100)]
    got = summarise(trials, "a", "b", calm_ms=130)
    row = got["burst.schedule_msgs_per_s"]
    assert (row["a"], row["b"]) == (150, 200)  # each system's own median rate
    assert row["all"] == {"median": 1.5, "min": 0.5, "max": 1.5, "ahead": 2, "pairs": 3}
    assert row["calm"] == {"median": 1.5, "min": 1.5, "max": 1.5, "ahead": 2, "pairs": 2}
    assert set(got) == {f"{phase}.{fig}" for phase, fig in FIGURES}
    loaded = summarise(trials[1:2], "a", "b", calm_ms=130)
    assert loaded["far.schedule_msgs_per_s"]["calm"] is None  # no calm pair: no calm ratio
    doc = {"pair": ["a", "b"], "size": 10, "calm_ms": 130, "trials": trials, "summary": got}
    text = table(doc)
    assert "3 pairs of 10 messages per phase (2 calm" in text
    assert "x1.50" in text and "x0.50-x1.50" in text and "2/3" in text


def test_saved_runs_pool_their_trials_and_refuse_another_pair() -> None:
    def run(*trials: dict[str, Any], pair: tuple[str, str] = ("a", "b")) -> dict[str, Any]:
        return {"pair": list(pair), "size": 10, "calm_ms": 130, "trials": list(trials)}

    both = pooled([run(_trial(110, 300, 200)), run(_trial(250, 100, 200), _trial(120, 150, 100))])
    assert len(both["trials"]) == 3
    assert both["summary"]["uniform.schedule_msgs_per_s"]["all"]["pairs"] == 3
    assert both["summary"]["uniform.schedule_msgs_per_s"]["calm"]["pairs"] == 2
    with pytest.raises(ValueError, match="different pairs or sizes"):
        pooled([run(_trial(110, 1, 1)), run(_trial(110, 1, 1), pair=("a", "c"))])
