"""A consumer group's delivery policy on delayq's wire (``server.convert``): every
field goes out and comes back as it was; a policy out of bounds, or with an enum
value this server does not know, is refused ``InvalidArgument`` naming the field
(``policy.backoff.max_ms``), never read as a default."""

from __future__ import annotations

import pytest

from delayq.delivery.policy import Backoff, BackoffKind, GroupPolicy, Jitter
from delayq.errors import InvalidArgument
from delayq.server.convert import group_policy, group_policy_wire
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
