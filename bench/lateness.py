"""Lateness figures of a benchmark run (pure): what every benchmark reports of the
latenesses it saw, in ms (delivered minus due; negative is early).

Percentiles are by rank on the sorted values (the value at index ``q * n``, the
last for ``q`` = 1), so each figure is one a message measured; -1 when nothing
was delivered. Figures are rounded to the hundredth of a ms (ints stay ints).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["lateness_figures", "percentile"]


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``ordered`` (sorted ascending); -1 when empty."""
    if not ordered:
        return -1
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def lateness_figures(ordered: Sequence[float]) -> dict[str, float]:
    """``lateness_ms_p50``/``_p99``/``_max`` and ``early_count`` of sorted latenesses."""
    return {
        "lateness_ms_p50": percentile(ordered, 0.5),
        "lateness_ms_p99": percentile(ordered, 0.99),
        "lateness_ms_max": percentile(ordered, 1.0),
        "early_count": sum(1 for x in ordered if x < 0),
    }
