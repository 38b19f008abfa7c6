"""delayq's wire to the engine's values and back (``server.convert``) where a
passed-on call's answer comes back from another shard: what the client is given
is what that shard answered."""

from __future__ import annotations

import grpc

from delayq.engine import CancelOutcome, LookupResult, MessageState
from delayq.server.convert import cancel_answer, cancel_results, looked_up, lookup_response
from delayq.server.statuscodes import PassedOn
from delayq.v1 import delayq_pb2 as pb


def test_another_shards_cancel_answers_reach_the_client_as_that_shard_gave_them() -> None:
    error = pb.ItemError(
        code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
        field="ids[0]",
        message="ids[0]: busy",
        retry_after_ms=40,
    )
    remote = [
        pb.CancelResult(id="a", error=error),
        pb.CancelResult(id="b", outcome=pb.CANCEL_OUTCOME_ALREADY_DELIVERED),
    ]
    answers = [cancel_answer(r) for r in remote]
    assert isinstance(answers[0], PassedOn)
    assert answers[0].code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert answers[1] is CancelOutcome.ALREADY_DELIVERED

    resp = pb.CancelResponse()
    cancel_results(resp.results, ["old-a", "old-b"], answers)
    assert resp.results[0] == pb.CancelResult(id="old-a", error=error)
    assert resp.results[1] == pb.CancelResult(
        id="old-b", outcome=pb.CANCEL_OUTCOME_ALREADY_DELIVERED
    )


def test_a_lookup_passed_on_is_answered_as_the_other_shard_answered_it() -> None:
    answered = (  # the states a lookup answers
        MessageState.PENDING,
        MessageState.CANCELLED,
        MessageState.DELIVERED,
        MessageState.RESCHEDULED,
    )
    for state in answered:
        r = LookupResult(
            id="x",
            state=state,
            topic="t",
            deliver_at_ms=5,
            accepted_ms=3,
            key="k",
            headers={"h": "v"},
            body=b"b",
        )
        wire = lookup_response(r)
        assert looked_up(pb.LookupResponse.FromString(wire.SerializeToString())) == r
