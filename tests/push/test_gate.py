"""A target's gate: the window under a limit, a Retry-After's hold of the whole
target, the circuit (probes only after OPEN_AFTER failures, closed by a live
answer) and its counters."""

from __future__ import annotations

from delayq.push.gate import OPEN_AFTER, TargetGate
from delayq.push.snapshot import PushState


def _gate() -> TargetGate:
    return TargetGate(probe_ms=lambda n: 1000 * n, now_ms=0)


def test_the_window_is_the_limit_less_those_in_flight() -> None:
    g = _gate()
    assert g.window(0, 3) == 3
    g.started()
    g.started()
    assert g.window(0, 3) == 1
    g.answered("2xx", 5, 0.002, None)
    assert (g.window(5, 3), g.in_flight, g.last_success_ms) == (2, 1, 5)


def test_a_retry_after_holds_the_whole_target() -> None:
    g = _gate()
    g.started()
    g.answered("429", 100, 0.01, 5000)
    assert g.window(100, 10) == 0 and g.window(5099, 10) == 0
    assert g.wake_ms(200) == 5100
    assert g.state(200) is PushState.THROTTLED
    assert g.window(5100, 10) == 10
    assert g.state(5100) is PushState.PUSHING
    assert g.not_before_ms == 5100


def test_the_circuit_opens_after_failures_and_probes_one_at_a_time() -> None:
    g = _gate()
    for i in range(OPEN_AFTER):
        g.started()
        g.answered("connect", 10 * i, 0.0, None)
    last = 10 * (OPEN_AFTER - 1)
    assert g.open and g.state(last) is PushState.BACKING_OFF
    probe_at = last + 1000 * OPEN_AFTER
    assert g.window(probe_at - 1, 100) == 0
    assert g.wake_ms(last) == probe_at
    assert g.window(probe_at, 100) == 1
    g.started()
    assert g.window(probe_at, 100) == 0  # the probe in flight: nothing else
    g.answered("2xx", probe_at + 1, 0.01, None)
    assert not g.open and g.window(probe_at + 1, 100) == 100
    assert g.consecutive_failures == 0


def test_a_live_answer_closes_the_circuit_but_counts_as_failing() -> None:
    g = _gate()
    for _ in range(OPEN_AFTER):
        g.started()
        g.answered("5xx", 0, 0.0, None)
    assert g.open
    g.started()
    g.answered("4xx", 10_000, 0.0, None)
    assert not g.open
    assert g.consecutive_failures == OPEN_AFTER + 1


def test_four_hundreds_never_open_the_circuit() -> None:
    g = _gate()
    for _ in range(OPEN_AFTER * 2):
        g.started()
        g.answered("4xx", 0, 0.0, None)
    assert not g.open and g.window(0, 4) == 4


def test_refused_is_a_state_and_no_latency() -> None:
    g = _gate()
    g.started()
    g.answered("refused", 0, 0.0, None)
    assert g.state(0) is PushState.REFUSED
    assert sum(g.latency.counts) == 0


def test_snapshot_counts_and_histograms() -> None:
    g = _gate()
    g.started()
    g.answered("2xx", 7, 0.02, None)  # latency bucket <= 0.025
    g.late(0.03)  # lateness bucket <= 0.05
    g.late(-1.0)  # early is counted as 0, never negative
    g.lost_ack()
    s = g.snapshot("t", "g", "http://h:80", PushState.PUSHING)
    assert s.requests["2xx"] == 1 and s.requests["5xx"] == 0
    assert s.latency_counts[2] == 1 and sum(s.latency_counts) == 1
    assert s.lateness_counts[0] == 1 and s.lateness_counts[2] == 1
    assert abs(s.latency_sum_s - 0.02) < 1e-9 and abs(s.lateness_sum_s - 0.03) < 1e-9
    assert (s.acks_lost, s.last_success_ms, s.in_flight) == (1, 7, 0)
    assert len(s.latency_counts) == 12 and len(s.lateness_counts) == 11
