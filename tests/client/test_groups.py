"""The client's group calls put together (``client.groups``, pure): a policy goes
out and comes back as it was; every shard must answer the same policy, a shard
that failed fails the call naming it (a write: and the shards that took it), a
shard that disagrees fails it naming it; the listing merges the shards' groups,
telling the disagreeing ones rather than raising."""

from __future__ import annotations

import grpc
import pytest

from delayq.client import (
    Backoff,
    BackoffKind,
    FailedPrecondition,
    GroupInfo,
    GroupPolicy,
    InvalidArgument,
    Jitter,
    ServerError,
    Unavailable,
    groups,
)
from delayq.client.core import policy_of
from delayq.v1 import delayq_pb2 as pb

POLICY = GroupPolicy(
    max_attempts=5,
    backoff=Backoff(
        kind=BackoffKind.EXPONENTIAL,
        initial_ms=1000,
        multiplier=2.5,
        max_ms=60_000,
        jitter=Jitter.FULL,
    ),
    rate_per_s=200.0,
    burst=50,
    max_in_flight=1000,
    paused=True,
)


class Refused(grpc.RpcError):  # type: ignore[misc]
    """A gRPC error as a stub raises it."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()


def test_a_policy_goes_out_and_comes_back_as_it_was() -> None:
    wire = pb.GroupPolicy.FromString(groups.policy_wire(POLICY).SerializeToString())
    assert policy_of(wire) == POLICY
    assert policy_of(pb.GroupPolicy()) == GroupPolicy(backoff=Backoff(multiplier=0.0))


def test_an_enum_value_this_client_does_not_know_is_a_server_error() -> None:
    wire = pb.GroupPolicy(backoff=pb.Backoff(kind=9))  # type: ignore[arg-type]
    with pytest.raises(ServerError, match="backoff kind 9"):
        policy_of(wire)


def test_shards_that_agree_answer_their_policy() -> None:
    answers = [("t", "g", POLICY, True), ("t", "g", POLICY, True), None]
    assert groups.agreed("group g of t", answers) == (POLICY, True)
    half = [("t", "g", POLICY, True), ("t", "g", POLICY, False)]
    assert groups.agreed("group g of t", half) == (POLICY, False)


def test_a_shard_that_disagrees_fails_the_call_naming_it() -> None:
    other = GroupPolicy()
    answers = [("t", "g", POLICY, True), ("t", "g", other, False), ("t", "g", other, False)]
    with pytest.raises(FailedPrecondition, match="shards 1, 2 disagree with shard 0"):
        groups.agreed("group g of t", answers)


def test_a_failed_shard_fails_a_write_naming_it_and_those_that_took_it() -> None:
    down = groups.Failed(Refused(grpc.StatusCode.UNAVAILABLE, "connection refused"))
    answers = [("t", "g", POLICY, True), down, ("t", "g", POLICY, True)]
    with pytest.raises(Unavailable) as failed:
        groups.agreed("group g of t", answers, write=True)
    assert "group g of t: shard 1 failed: connection refused" in str(failed.value)
    assert "done on shards 0, 2; call again" in str(failed.value)
    with pytest.raises(Unavailable) as read:
        groups.agreed("group g of t", answers)
    assert "done on" not in str(read.value)


def test_a_refusal_keeps_its_kind_and_field() -> None:
    bad = Refused(grpc.StatusCode.INVALID_ARGUMENT, "policy.rate_per_s: is -1.0; 0 or more")
    with pytest.raises(InvalidArgument) as refused:
        groups.agreed("group g of t", [groups.Failed(bad), ("t", "g", POLICY, True)])
    assert "shard 0 failed: policy.rate_per_s" in str(refused.value)


def test_no_shard_answering_is_a_server_error() -> None:
    with pytest.raises(ServerError, match="no shard answered"):
        groups.agreed("group g of t", [None])


def test_the_listing_merges_the_shards_groups_and_tells_disagreement() -> None:
    other = GroupPolicy()
    shard0 = [("a", "g1", POLICY, True), ("b", "g2", other, False)]
    shard1 = [("a", "g1", other, False), ("a", "g0", other, False)]
    assert groups.merge_groups([shard0, shard1, None]) == [
        GroupInfo("a", "g0", other, False, (1,)),
        GroupInfo("a", "g1", POLICY, True, (0, 1), (1,)),
        GroupInfo("b", "g2", other, False, (0,)),
    ]
    down = groups.Failed(Refused(grpc.StatusCode.UNAVAILABLE, "gone"))
    with pytest.raises(Unavailable, match="groups: shard 1 failed: gone"):
        groups.merge_groups([shard0, down])
