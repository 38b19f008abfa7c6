"""A consumer group's delivery policy on delayq's wire (``server.convert``, a push
target's ``server.pushwire``): every field goes out and comes back as it was (a
push target shown in Stats without credentials, query, headers or CA bundle); a
policy out of bounds, or with an enum value this server does not know, is refused
``InvalidArgument`` naming the field (``policy.backoff.max_ms``), never read as a
default."""

from __future__ import annotations

import pytest

from delayq.delivery.policy import Backoff, BackoffKind, GroupPolicy, Jitter
from delayq.delivery.pushtarget import PushTarget
from delayq.errors import InvalidArgument
from delayq.push.snapshot import PushSnapshot, PushState, quantile_ms
from delayq.server.convert import group_policy, group_policy_wire
from delayq.server.pushwire import push_stats_wire
from delayq.v1 import delayq_pb2 as pb


def wire(policy: GroupPolicy) -> pb.GroupPolicy:
    out = pb.GroupPolicy()
    group_policy_wire(policy, out)
    return pb.GroupPolicy.FromString(out.SerializeToString())


@pytest.mark.parametrize("jitter", list(Jitter))
@pytest.mark.parametrize("kind", list(BackoffKind))
def test_every_field_and_enum_value_comes_back(kind: BackoffKind, jitter: Jitter) -> None:
    backoff = Backoff(kind=kind, initial_ms=1500, multiplier=3.5, max_ms=300_000, jitter=jitter)
    policy = GroupPolicy(
        max_attempts=7, backoff=backoff, rate_per_s=12.5, burst=40, max_in_flight=900, paused=True
    )
    assert group_policy(wire(policy), 16) == policy


def test_an_empty_policy_is_the_defaults_with_the_multiplier_filled_in() -> None:
    assert group_policy(pb.GroupPolicy(), 16) == GroupPolicy(max_attempts=16)
    assert group_policy(pb.GroupPolicy(), 16).backoff.multiplier == 2.0


def test_max_attempts_left_out_is_the_servers_and_0_given_is_no_limit() -> None:
    assert group_policy(pb.GroupPolicy(rate_per_s=200), 3).max_attempts == 3
    assert group_policy(pb.GroupPolicy(max_attempts=0), 3).max_attempts == 0
    assert group_policy(pb.GroupPolicy(max_attempts=5), 3).max_attempts == 5
    # the answer always carries the number, 0 included
    assert wire(GroupPolicy(max_attempts=0)).HasField("max_attempts")


def test_a_rate_without_a_burst_gets_the_rate_rounded_up() -> None:
    assert group_policy(pb.GroupPolicy(rate_per_s=2.5), 16).burst == 3


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"rate_per_s": -1.0}, "policy.rate_per_s"),
        ({"rate_per_s": float("nan")}, "policy.rate_per_s"),
        ({"rate_per_s": 1e12}, "policy.rate_per_s"),
        ({"max_attempts": -3}, "policy.max_attempts"),
        ({"max_attempts": 2**31 - 1}, "policy.max_attempts"),
        ({"max_in_flight": 2**63 - 1}, "policy.max_in_flight"),
        ({"burst": -1}, "policy.burst"),
        (
            {"backoff": pb.Backoff(kind=pb.BACKOFF_KIND_EXPONENTIAL, initial_ms=5000, max_ms=10)},
            "policy.backoff.max_ms",
        ),
        ({"backoff": pb.Backoff(initial_ms=-1)}, "policy.backoff.initial_ms"),
        ({"backoff": pb.Backoff(initial_ms=2**40)}, "policy.backoff.initial_ms"),
        (
            {"backoff": pb.Backoff(kind=pb.BACKOFF_KIND_EXPONENTIAL, multiplier=0.5)},
            "policy.backoff.multiplier",
        ),
        ({"backoff": pb.Backoff(kind=7)}, "policy.backoff.kind"),  # type: ignore[arg-type]
        ({"backoff": pb.Backoff(jitter=-2)}, "policy.backoff.jitter"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_policy_is_refused_naming_its_field(change: dict[str, object], field: str) -> None:
    bad = pb.GroupPolicy(**change)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument) as refused:
        group_policy(pb.GroupPolicy.FromString(bad.SerializeToString()), 16)
    assert refused.value.field == field
    assert str(refused.value).startswith(field)


def test_the_prefix_names_where_the_policy_sits() -> None:
    with pytest.raises(InvalidArgument) as refused:
        group_policy(pb.GroupPolicy(burst=-1), 16, "groups[2].policy")
    assert refused.value.field == "groups[2].policy.burst"


TARGET = PushTarget(
    url="https://user:pw@hooks.example.com:8443/in?token=abc",
    method="PATCH",
    headers=(("X-Api-Key", "Bearer t"), ("x-env", "prod")),
    timeout_ms=2500,
    ca_bundle="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    secret_ref="hooks/current",
)


def test_a_push_target_comes_back_as_set_and_is_shown_without_credentials() -> None:
    policy = GroupPolicy(max_attempts=3, push=TARGET)
    assert group_policy(wire(policy), 16) == policy
    assert not wire(GroupPolicy()).HasField("push"), "a pull group: no target"
    shown = pb.GroupPolicy()
    group_policy_wire(policy, shown, shown=True)
    assert shown.push.url == "https://hooks.example.com:8443/in"
    assert (shown.push.method, shown.push.timeout_ms, shown.push.secret_ref) == (
        "PATCH", 2500, "hooks/current",
    )  # fmt: skip
    assert not shown.push.headers and not shown.push.ca_bundle
    for secret in ("pw", "token", "Bearer"):
        assert secret not in str(shown)


def test_a_push_targets_wire_defaults_are_filled_in() -> None:
    got = group_policy(pb.GroupPolicy(push=pb.PushTarget(url="http://h.example/x")), 16).push
    assert got == PushTarget(url="http://h.example/x", method="POST", timeout_ms=10_000)


@pytest.mark.parametrize(
    ("target", "field"),
    [
        (pb.PushTarget(), "policy.push.url"),
        (pb.PushTarget(url="gopher://h/"), "policy.push.url"),
        (pb.PushTarget(url="http://h/", method="DELETE"), "policy.push.method"),
        (pb.PushTarget(url="http://h/", headers={"Host": "x"}), "policy.push.headers"),
        (pb.PushTarget(url="http://h/", timeout_ms=-1), "policy.push.timeout_ms"),
        (pb.PushTarget(url="http://h/", ca_bundle="x"), "policy.push.ca_bundle"),
        (pb.PushTarget(url="http://h/", secret_ref="../x"), "policy.push.secret_ref"),
    ],
)
def test_a_bad_push_target_is_refused_naming_its_field(target: pb.PushTarget, field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        group_policy(pb.GroupPolicy(push=target), 16)
    assert refused.value.field == field


def test_a_pushers_figures_go_out_with_their_quantiles() -> None:
    snap = PushSnapshot(
        topic="t", group="g", target="https://h:443", state=PushState.THROTTLED,
        requests={"2xx": 90, "429": 10, "5xx": 0}, in_flight=3, consecutive_failures=2,
        last_success_ms=1_700_000_000_000, not_before_ms=1_700_000_005_000, acks_lost=1,
        latency_counts=(0, 0, 50, 0, 0, 0, 0, 0, 0, 0, 0, 1), latency_sum_s=1.2,
        lateness_counts=(99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1), lateness_sum_s=400.0,
    )  # fmt: skip
    out = pb.PushStats()
    push_stats_wire(snap, out)
    assert (out.target, out.state, dict(out.requests)) == (
        "https://h:443", "throttled", {"2xx": 90, "429": 10},
    )  # fmt: skip
    assert (out.in_flight, out.consecutive_failures, out.acks_lost) == (3, 2, 1)
    assert (out.last_success_ms, out.not_before_ms) == (1_700_000_000_000, 1_700_000_005_000)
    assert (out.latency_ms_p50, out.latency_ms_p99) == (25, 10_000), "+Inf: the last bound"
    assert (out.lateness_ms_p50, out.lateness_ms_p99) == (10, 10)
    assert quantile_ms((0, 0, 1), (0.01, 0.02), 0.5) == 20, "+Inf: the last bound"
    assert quantile_ms((0, 0, 0), (0.01, 0.02), 0.99) == 0, "none: 0"
