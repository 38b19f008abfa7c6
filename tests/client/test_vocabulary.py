"""One public vocabulary, against a real server: what ``delayq`` names is what the
client answers and raises (``delayq.MessageState``, ``delayq.InvalidArgument``...),
and the embedded engine raises the same exception tree; a one-message call
raises its item's error, in the sync and the async client alike, while the batch
forms answer per item."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

import delayq
from delayq.engine import ScheduleRequest
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]


@pytest.fixture
def address(start_server: Start) -> str:
    return start_server().address


def test_a_pending_message_looks_up_as_delayq_message_state_pending(address: str) -> None:
    with delayq.Client(address) as c:
        sent = c.schedule("orders", b"x", delay=3600)
        assert c.lookup(sent.id).state == delayq.MessageState.PENDING
        [outcome] = c.cancel(sent.id)
        assert outcome is delayq.CancelOutcome.CANCELLED
        assert c.lookup(sent.id).state is delayq.MessageState.CANCELLED


def test_a_refused_message_raises_delayq_invalid_argument_naming_the_field(address: str) -> None:
    with delayq.Client(address) as c:
        with pytest.raises(delayq.InvalidArgument, match="delay_ms") as refused:
            c.schedule("orders", b"x", delay=-5)
        assert refused.value.field.endswith("delay_ms")
        assert isinstance(refused.value, delayq.ClientError)
        try:
            c.schedule("bad topic!", b"x", delay=1)
        except delayq.InvalidArgument as exc:  # the words, as a user writes them
            assert "topic" in str(exc)
        else:
            pytest.fail("a bad topic was not refused")


def test_one_id_raises_many_ids_answer_per_item(address: str) -> None:
    with delayq.Client(address) as c:
        with pytest.raises(delayq.InvalidArgument, match="malformed"):
            c.cancel("nonsense")
        assert c.cancel() == []  # no id, no outcome
        with pytest.raises(delayq.InvalidArgument):
            c.lookup("nonsense")
        sent = c.schedule("orders", b"x", delay=3600)
        outcomes = c.cancel(sent.id, "nonsense")
        assert outcomes[0] is delayq.CancelOutcome.CANCELLED
        assert isinstance(outcomes[1], delayq.ItemError) and "malformed" in outcomes[1].message
        with pytest.raises(delayq.FailedPrecondition, match="cancelled"):
            c.reschedule(sent.id, delay=5)
        # a batch answers per message: the refused one has its error, the others ids
        batch = c.schedule_many(
            [
                delayq.Outgoing(topic="orders", body=b"a", delay=1),
                delayq.Outgoing(topic="orders", body=b"b", delay=-5),
            ]
        )
        assert batch[0].ok and batch[1].error is not None
        assert batch[1].error.field.endswith("delay_ms")


def test_a_producers_refused_message_raises_from_its_future(address: str) -> None:
    with delayq.Client(address) as c, c.producer() as p:
        good, bad = p.send("orders", b"a", delay=1), p.send("orders", b"b", delay=-5)
        assert good.result(timeout=30).id
        with pytest.raises(delayq.InvalidArgument, match="delay_ms"):
            bad.result(timeout=30)


def test_the_async_client_raises_the_same(address: str) -> None:
    async def main() -> None:
        async with delayq.AsyncClient(address) as c:
            sent = await c.schedule("orders", b"x", delay=3600)
            assert (await c.lookup(sent.id)).state == delayq.MessageState.PENDING
            with pytest.raises(delayq.InvalidArgument, match="delay_ms"):
                await c.schedule("orders", b"x", delay=-5)
            with pytest.raises(delayq.InvalidArgument):
                await c.schedule("bad topic!", b"x", delay=1)
            with pytest.raises(delayq.InvalidArgument):
                await c.cancel("nonsense")

    asyncio.run(main())


def test_the_embedded_engine_raises_the_same_tree(tmp_path: Path) -> None:
    with delayq.Engine(delayq.EngineSettings(data_dir=tmp_path / "data")) as engine:
        [out] = engine.schedule([ScheduleRequest(topic="bad topic!", body=b"x")])
        assert isinstance(out.error, delayq.InvalidArgument)
        with pytest.raises(delayq.InvalidArgument):
            engine.lookup("nonsense")
