"""The push families (``server.pushmetrics``) from pushers' snapshots, as a scrape
writes them: a series per push group, buckets cumulative, the state one-hot, none
at all without a push group."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from delayq.push.snapshot import LATENCY_BOUNDS_S, LATENESS_BOUNDS_S, PushSnapshot, PushState
from delayq.server.pushmetrics import PushCollector


def _snapshot(group: str, state: PushState, *, failures: int = 0) -> PushSnapshot:
    latency = [0] * (len(LATENCY_BOUNDS_S) + 1)
    latency[0], latency[3], latency[-1] = 4, 1, 2  # <=5 ms, <=50 ms, over 10 s
    return PushSnapshot(
        topic="t",
        group=group,
        target="https://hooks.example.com:443",
        state=state,
        requests={"2xx": 5, "timeout": 2},
        in_flight=3,
        consecutive_failures=failures,
        last_success_ms=1_700_000_000_500,
        not_before_ms=0,
        acks_lost=1,
        latency_counts=tuple(latency),
        latency_sum_s=40.5,
        lateness_counts=(1,) + (0,) * len(LATENESS_BOUNDS_S),
        lateness_sum_s=0.002,
    )


def _samples(snapshots: list[PushSnapshot]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry()
    registry.register(PushCollector(lambda: snapshots))
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_a_series_per_push_group_with_cumulative_buckets_and_one_state() -> None:
    got = _samples(
        [_snapshot("b", PushState.BACKING_OFF, failures=6), _snapshot("a", PushState.PUSHING)]
    )

    def value(name: str, group: str, **more: str) -> float:
        key = {"topic": "t", "group": group, "target": "https://hooks.example.com:443", **more}
        return got[(name, frozenset(key.items()))]

    assert value("delayq_push_requests_total", "a", outcome="2xx") == 5
    assert value("delayq_push_requests_total", "a", outcome="timeout") == 2
    assert value("delayq_push_requests_total", "a", outcome="refused") == 0  # every class
    bucket = "delayq_push_request_duration_seconds_bucket"
    assert value(bucket, "a", le="0.005") == 4
    assert value(bucket, "a", le="0.05") == 5  # cumulative
    assert value(bucket, "a", le="10.0") == 5
    assert value(bucket, "a", le="+Inf") == 7
    assert value("delayq_push_request_duration_seconds_count", "a") == 7
    assert value("delayq_push_request_duration_seconds_sum", "a") == 40.5
    assert value("delayq_push_lateness_seconds_bucket", "a", le="0.01") == 1
    assert value("delayq_push_in_flight", "a") == 3
    assert value("delayq_push_consecutive_failures", "b") == 6
    assert value("delayq_push_last_success_timestamp_seconds", "a") == 1_700_000_000.5
    assert value("delayq_push_acks_lost_total", "a") == 1
    states = {s.value: value("delayq_push_state", "b", state=s.value) for s in PushState}
    assert states == {s.value: float(s is PushState.BACKING_OFF) for s in PushState}


def test_no_push_group_no_push_family() -> None:
    assert _samples([]) == {}
