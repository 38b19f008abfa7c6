"""Concurrent calls gathered into one engine call (``server.gathering``,
``server.batches``): the mechanism on its own, the merge of schedule batches
against a real engine, and concurrent one-message calls of real clients against a
real server, each answered with its own outcome while the node makes fewer engine
calls than it answered."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import delayq
from delayq.engine import Engine, ScheduleBatch
from delayq.errors import DelayqError, InvalidArgument, NotFound
from delayq.server.batches import Batches, Settle
from delayq.server.gathering import Gathering, merged, renumbered, split, whole
from delayq.server.topology import Topology
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]


class _Recorder:
    """A batch call that records the batches it got and answers each item from
    ``answer`` (which may return an error for an item, or raise for the batch)."""

    def __init__(self, answer: Callable[[int], int | DelayqError] = lambda x: x * 10) -> None:
        self.batches: list[list[int]] = []
        self.answer = answer
        self.gate: asyncio.Event | None = None

    async def __call__(self, items: list[int]) -> Sequence[int | DelayqError]:
        self.batches.append(list(items))
        if self.gate is not None:
            await self.gate.wait()
        return [self.answer(x) for x in items]


def _gathering(rec: _Recorder, most: int = 100) -> Gathering[int, int]:
    return Gathering(rec, lambda x: 1 if x >= 0 else 3, most)


def test_callers_of_one_turn_make_one_call_each_answered_with_its_own() -> None:
    async def main() -> None:
        rec = _Recorder()
        g = _gathering(rec)
        got = await asyncio.gather(*(g(x) for x in range(20)))
        assert got == [x * 10 for x in range(20)]
        assert rec.batches == [list(range(20))]
        assert (g.batches, g.items) == (1, 20)
        assert await g(7) == 70  # alone, at once
        assert rec.batches[-1] == [7]

    asyncio.run(main())


def test_an_items_error_is_its_callers_alone_and_a_calls_error_everyones() -> None:
    async def main() -> None:
        rec = _Recorder(lambda x: NotFound("id", "no such message") if x == 3 else x)
        g = _gathering(rec)
        got = await asyncio.gather(*(g(x) for x in range(6)), return_exceptions=True)
        assert [type(x) for x in got] == [int, int, int, NotFound, int, int]

        def broken(x: int) -> int:
            raise InvalidArgument("topic", "broken")

        rec.answer = broken
        got = await asyncio.gather(*(g(x) for x in range(4)), return_exceptions=True)
        assert all(isinstance(x, InvalidArgument) for x in got)
        rec.answer = lambda x: x
        assert await g(5) == 5  # the gathering goes on after a failed call

    asyncio.run(main())


def test_a_batch_holds_at_most_its_weight_and_later_arrivals_form_the_next() -> None:
    async def main() -> None:
        rec = _Recorder()
        rec.gate = asyncio.Event()
        g = _gathering(rec, most=4)
        first = [asyncio.ensure_future(g(x)) for x in range(6)]
        await asyncio.sleep(0.01)
        assert rec.batches == [[0, 1, 2, 3]]  # the rest wait while it runs
        late = [asyncio.ensure_future(g(x)) for x in (10, -1)]  # -1 weighs 3
        rec.gate.set()
        await asyncio.gather(*first, *late)
        assert rec.batches == [[0, 1, 2, 3], [4, 5, 10], [-1]]
        assert [f.result() for f in late] == [100, -10]
        heavy = await asyncio.gather(g(-2), g(-3))  # each over half: one per call
        assert heavy == [-20, -30] and rec.batches[-2:] == [[-2], [-3]]

    asyncio.run(main())


def test_a_cancelled_caller_is_left_out_and_the_others_are_answered() -> None:
    async def main() -> None:
        rec = _Recorder()
        rec.gate = asyncio.Event()
        g = _gathering(rec)
        running = asyncio.ensure_future(g(1))
        await asyncio.sleep(0.01)
        queued = [asyncio.ensure_future(g(x)) for x in (2, 3, 4)]
        await asyncio.sleep(0)
        queued[1].cancel()  # waiting for the next batch: never sent
        running.cancel()  # its batch runs on
        rec.gate.set()
        await asyncio.sleep(0.01)
        assert queued[0].result() == 20 and queued[2].result() == 40
        assert rec.batches == [[1], [2, 4]]
        g.close()

    asyncio.run(main())


def test_close_cancels_the_running_batchs_callers_and_a_later_call_drains_again() -> None:
    async def main() -> None:
        rec = _Recorder()
        rec.gate = asyncio.Event()
        g = _gathering(rec)
        running = asyncio.ensure_future(g(1))
        await asyncio.sleep(0.01)
        queued = asyncio.ensure_future(g(2))
        await asyncio.sleep(0)
        g.close()
        await asyncio.sleep(0)
        assert running.cancelled() and queued.cancelled()
        rec.gate.set()
        assert await g(3) == 30  # a new drain

    asyncio.run(main())


def test_one_settling_engine_calls_failure_is_its_callers_alone(
    make_engine: Callable[..., Engine],
) -> None:
    """Two groups' acks in one batch, the second group's engine call failing with an
    error outside delayq's tree (an I/O error, say): the first group's callers get
    their outcomes (their acks were written), the second's the error."""
    engine = make_engine()
    batches = Batches(engine, Topology(None, 0, "127.0.0.1:1"))

    def broken(receipts: list[str]) -> list[object]:
        raise OSError("EIO")

    asked = [
        Settle(("ack", "t", "g"), ["zzz"], "receipts", lambda rs: engine.ack("t", "g", rs)),
        Settle(("ack", "t", "h"), ["r1", "r2"], "receipts", broken),
        Settle(("ack", "t", "g"), ["yyy", "xxx"], "receipts", lambda rs: engine.ack("t", "g", rs)),
    ]
    out = batches.settle(asked)
    assert isinstance(out[1], OSError)
    first, third = out[0], out[2]
    assert isinstance(first, list) and isinstance(third, list)
    assert [getattr(e, "field", "") for e in first] == ["receipts[0]"]
    assert [getattr(e, "field", "") for e in third] == ["receipts[0]", "receipts[1]"]


def _batches() -> list[ScheduleBatch]:
    return [
        ScheduleBatch(topic="a", bodies=[b"1", b"2"], delay_ms=[5_000, 0]),
        ScheduleBatch(topic=["b", "c"], bodies=[b"3", b"4"], keys=["k", ""]),
        ScheduleBatch(topic="a", bodies=[b"5"], deliver_at_ms=[1], headers=[{"h": "v"}]),
        ScheduleBatch(topic="a", bodies=[b""], delay_level=[1]),  # refused: an empty body
    ]


def test_merged_batches_schedule_as_each_alone(
    make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    engine = make_engine()
    parts = _batches()
    assert all(whole(b) for b in parts)
    assert not whole(ScheduleBatch(topic="a", bodies=[b"x"], keys=["k", "k2"]))
    one = merged(parts)
    assert list(one.bodies) == [b"1", b"2", b"3", b"4", b"5", b""]
    assert list(one.topic) == ["a", "a", "b", "c", "a", "a"]
    assert list(one.keys or []) == ["", "", "k", "", "", ""]
    out = split(engine.schedule_batch(one), [len(b.bodies) for b in parts])
    assert [len(o.ids) for o in out] == [2, 2, 1, 1]
    assert list(out[3].errors) == [0] and "body" in str(out[3].errors[0])
    for part, got in zip(parts, out, strict=True):
        for i, mid in enumerate(got.ids):
            if mid is None:
                continue
            found = engine.lookup(mid)
            assert found.body == part.bodies[i]
            assert found.topic == (part.topic if isinstance(part.topic, str) else part.topic[i])
    assert out[0].deliver_at_ms[0] - out[0].deliver_at_ms[1] == 5_000
    assert engine.lookup(out[2].ids[0] or "").headers == {"h": "v"}
    assert merged(parts[:1]) is parts[0]


def test_an_items_error_is_renamed_as_its_callers_call_names_it() -> None:
    e = renumbered(NotFound("ids[7]", "no such message"), 7, 0, 1)
    assert (e.field, str(e)) == ("id", "id: no such message")
    e = renumbered(InvalidArgument("receipts[9]", "malformed"), 9, 2, 3)
    assert (e.field, str(e)) == ("receipts[2]", "receipts[2]: malformed")
    plain = InvalidArgument("body", "must not be empty")
    assert renumbered(plain, 4, 0, 1) is plain and str(plain) == "body: must not be empty"


def _gathered(address: str) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, s.labels["call"]): s.value
        for fam in text_string_to_metric_families(text)
        if fam.name.startswith("delayq_gathered_")
        for s in fam.samples
        if s.name.endswith("_total")
    }


@pytest.mark.timeout(120)
def test_concurrent_one_message_calls_of_clients_share_engine_calls(start_server: Start) -> None:
    """64 one-message schedules at once (one a refusal: an empty body), then 64
    one-id cancels (one of an id never handed out) and 64 one-receipt acks, with
    sync flush (each engine call waits for an fsync on the pool, so calls arriving
    meanwhile form the next batch): every caller gets its own answer, every call
    is counted, and the schedules formed fewer batches than there were callers."""
    srv = start_server("--flush", "sync")
    n = 64

    async def main() -> None:
        async with delayq.AsyncClient(srv.address) as c:
            for _ in range(2):  # the first is the warm-up of the channel
                bodies = [b""] + [f"m{i}".encode() for i in range(1, n)]
                sent = await asyncio.gather(
                    *(c.schedule("t", b, delay=3600) for b in bodies), return_exceptions=True
                )
            assert isinstance(sent[0], delayq.InvalidArgument) and "body" in str(sent[0])
            ids = [s.id for s in sent[1:] if isinstance(s, delayq.Scheduled)]
            assert len(set(ids)) == n - 1
            for mid, b in zip(ids, bodies[1:], strict=True):
                assert (await c.lookup(mid)).body == b
            unknown = ids[0][:-2] + ("AA" if not ids[0].endswith("AA") else "AB")
            outcomes = await asyncio.gather(
                *(c.cancel(i) for i in [*ids, unknown]), return_exceptions=True
            )
            assert outcomes[:-1] == [[delayq.CancelOutcome.CANCELLED]] * (n - 1)
            assert outcomes[-1] in ([delayq.CancelOutcome.NOT_FOUND],) or isinstance(
                outcomes[-1], delayq.DelayqError
            )
            await c.schedule_many(
                [delayq.Outgoing(topic="r", body=f"r{i}".encode()) for i in range(n)]
            )
            got: list[delayq.Received] = []
            while len(got) < n:
                got += await c.receive("r", "g", max_messages=n - len(got), wait_s=5)
            acked = await asyncio.gather(*(c.ack("r", "g", [m.receipt]) for m in got))
            assert acked == [[delayq.AckOutcome.ACKED]] * n

    asyncio.run(main())
    counts = _gathered(srv.metrics_address())
    for call, answered in (("schedule", 2 * n), ("cancel", n), ("settle", n)):
        callers = counts[("delayq_gathered_callers_total", call)]
        batches = counts[("delayq_gathered_batches_total", call)]
        assert callers >= answered, (call, counts)
        assert 0 < batches <= callers, (call, counts)
    # 128 schedules at once, each engine call waiting for an fsync on the pool while
    # the others queue: they share batches (13 for 129 callers where measured)
    schedules = counts[("delayq_gathered_batches_total", "schedule")]
    assert schedules < counts[("delayq_gathered_callers_total", "schedule")], counts
