"""The families of recurring schedules on one node (``metrics.EngineCollector``
yields them, read at scrape time from the engine): how many schedules the shard
holds (its plans, pending messages of the reserved topic), the nominal times its
firer wrote, the plan copies written, and those its catch-up skipped (counted by
the master that fired them, since its process started), and each firing's
lateness (written minus nominal; 0 for the firings written ahead). Names, types
and labels are pinned by ``tests/server/test_metric_names.py`` and listed in
``docs/operations.md``; the dashboard's *Schedules* row and
``DelayqScheduleFiringsMissed`` read them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..engine import Engine
from .exposition import lateness_family

__all__ = ["schedule_families"]


def schedule_families(engine: Engine) -> Iterator[Any]:
    """The schedules' families of an open shard."""
    seen = engine.observing
    counters = seen.counters
    yield GaugeMetricFamily(
        "delayq_schedules",
        "Recurring schedules this shard holds (their plans; paused and ended ones included).",
        value=seen.schedules(),
    )
    yield CounterMetricFamily(
        "delayq_schedule_firings",
        "Nominal times of recurring schedules fired (each a message of its template's topic).",
        value=counters.get("schedule_firings", 0),
    )
    yield CounterMetricFamily(
        "delayq_schedule_plans",
        "Plan copies of recurring schedules written (a create, update, pause or resume, "
        "and each firing step's next copy); not in delayq_scheduled_total.",
        value=counters.get("schedule_plans", 0),
    )
    yield CounterMetricFamily(
        "delayq_schedule_missed",
        "Nominal times of recurring schedules missed and skipped under their catch-up policy.",
        value=counters.get("schedule_missed", 0),
    )
    yield lateness_family(
        "delayq_schedule_lateness_seconds",
        "Per firing, when it was written minus its nominal time (0: written ahead).",
        seen.schedule_lateness_snapshot(),
    )
