"""delayq's wire to the engine's values and back (``server.convert``): where a
passed-on call's answer comes back from another shard, what the client is given
is what that shard answered; an ack's packed outcomes, one byte per receipt in
order, whatever mix of outcomes and errors."""

from __future__ import annotations

import grpc
import pytest

from delayq.engine import AckOutcome, CancelOutcome, LookupResult, MessageState
from delayq.errors import DelayqError, InvalidArgument
from delayq.server.convert import (
    cancel_answer,
    cancel_results,
    looked_up,
    lookup_response,
    packed_outcomes,
)
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


_BAD = InvalidArgument("receipts[1]", "malformed")
_ACKED, _AGAIN = AckOutcome.ACKED, AckOutcome.ALREADY_ACKED


@pytest.mark.parametrize(
    "out",
    [
        [],
        [_ACKED] * 3,
        [_AGAIN] * 2,
        [_ACKED, _AGAIN, _ACKED],
        [_BAD, _BAD],
        [_BAD, _ACKED],
        [_ACKED, _BAD, _ACKED],
        [_AGAIN, AckOutcome.STALE, AckOutcome.NOT_FOUND, AckOutcome.INVALID_RECEIPT],
    ],
)
def test_an_acks_packed_outcomes_are_a_byte_per_receipt_in_order(
    out: list[AckOutcome | DelayqError],
) -> None:
    codes = {
        _ACKED: pb.ACK_OUTCOME_ACKED,
        _AGAIN: pb.ACK_OUTCOME_ALREADY_ACKED,
        AckOutcome.STALE: pb.ACK_OUTCOME_STALE,
        AckOutcome.NOT_FOUND: pb.ACK_OUTCOME_NOT_FOUND,
        AckOutcome.INVALID_RECEIPT: pb.ACK_OUTCOME_INVALID_RECEIPT,
    }
    resp = pb.AckResponse()
    got = packed_outcomes(resp.errors, out)
    assert list(got) == [0 if isinstance(o, DelayqError) else codes[o] for o in out]
    assert [e.index for e in resp.errors] == [
        i for i, o in enumerate(out) if isinstance(o, DelayqError)
    ]
    assert all(e.error.field == "receipts[1]" for e in resp.errors)
