"""The families of push delivery (pure: from the pushers' ``PushSnapshot``s, read at
scrape time; ``metrics.registry`` registers ``PushCollector`` over the node's
``Calls.push_snapshots``). A series per push group this node pushes, labelled
``topic``, ``group`` and ``target`` (the target's origin, ``scheme://host:port``:
never the URL's credentials, path or query): requests by outcome class, request
duration and first-attempt lateness histograms, in flight, consecutive failures,
the last 2xx, acks lost to a lost mastership, and the pusher's state. Only a
shard's master pushes, so a replica serves none of them; a node with no push group
serves none either. Names, types and labels are pinned by
``tests/server/test_metric_names.py`` and listed in ``docs/operations.md``; the
dashboard's *Push* row and the ``delayq-push`` alerts read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ..push.snapshot import LATENCY_BOUNDS_S, LATENESS_BOUNDS_S, OUTCOMES, PushSnapshot, PushState

__all__ = ["PushCollector", "push_families"]

_LABELS = ["topic", "group", "target"]


def _buckets(counts: Sequence[int], bounds_s: Sequence[float]) -> list[tuple[str, float]]:
    """Per-bucket counts (``snapshot``'s: the last one above the last bound) as
    Prometheus' cumulative buckets, ``+Inf`` last."""
    les = [repr(float(b)) for b in bounds_s] + ["+Inf"]
    return list(zip(les, accumulate(counts), strict=True))


def push_families(snapshots: Sequence[PushSnapshot]) -> Iterator[Any]:
    """The push families of ``snapshots`` (none when there are none)."""
    if not snapshots:
        return
    rows = sorted(snapshots, key=lambda s: (s.topic, s.group))
    requests = CounterMetricFamily(
        "delayq_push_requests",
        "Push requests answered or failed, by outcome class (2xx 429 503 4xx 5xx timeout "
        "connect tls refused other).",
        labels=[*_LABELS, "outcome"],
    )
    duration = HistogramMetricFamily(
        "delayq_push_request_duration_seconds",
        "A push request's duration, from its start to its answer or error.",
        labels=_LABELS,
    )
    lateness = HistogramMetricFamily(
        "delayq_push_lateness_seconds",
        "A message's first push attempt's start minus its due time.",
        labels=_LABELS,
    )
    in_flight = GaugeMetricFamily(
        "delayq_push_in_flight", "Push requests started, not yet answered.", labels=_LABELS
    )
    failures = GaugeMetricFamily(
        "delayq_push_consecutive_failures",
        "Push requests that failed in a row since the last 2xx (0 after a 2xx).",
        labels=_LABELS,
    )
    last_ok = GaugeMetricFamily(
        "delayq_push_last_success_timestamp_seconds",
        "Unix time of the target's last 2xx (0: none since this node began pushing it).",
        labels=_LABELS,
    )
    acks_lost = CounterMetricFamily(
        "delayq_push_acks_lost",
        "2xx answers whose ack the shard refused (it was no longer master): the next "
        "master pushes those messages again (duplicates).",
        labels=_LABELS,
    )
    state = GaugeMetricFamily(
        "delayq_push_state",
        "1 for the pusher's state: pushing, throttled (Retry-After), backing_off (the "
        "circuit is open), refused (egress), no_secret.",
        labels=[*_LABELS, "state"],
    )
    for s in rows:
        key = [s.topic, s.group, s.target]
        for outcome in OUTCOMES:
            requests.add_metric([*key, outcome], s.requests.get(outcome, 0))
        duration.add_metric(
            key, _buckets(s.latency_counts, LATENCY_BOUNDS_S), sum_value=s.latency_sum_s
        )
        lateness.add_metric(
            key, _buckets(s.lateness_counts, LATENESS_BOUNDS_S), sum_value=s.lateness_sum_s
        )
        in_flight.add_metric(key, s.in_flight)
        failures.add_metric(key, s.consecutive_failures)
        last_ok.add_metric(key, s.last_success_ms / 1000)
        acks_lost.add_metric(key, s.acks_lost)
        for name in PushState:
            state.add_metric([*key, name.value], s.state is name)
    yield from (requests, duration, lateness, in_flight, failures, last_ok, acks_lost, state)


class PushCollector:
    """The push families of what ``snapshots`` answers at each scrape."""

    def __init__(self, snapshots: Callable[[], Sequence[PushSnapshot]]) -> None:
        self._snapshots = snapshots

    def collect(self) -> Iterator[Any]:
        yield from push_families(self._snapshots())
