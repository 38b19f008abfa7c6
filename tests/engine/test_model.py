"""Property test: random schedules, cancels, reschedules, receives/acks, clock
jumps, clean restarts and kills, checked against a plain in-memory model."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from delayq import Engine, FailedPrecondition, FakeClock
from delayq.engine import AckOutcome, CancelOutcome, MessageState, ScheduleRequest
from tests.support.engines import START_MS, small_settings
from tests.support.sizes import size

TOPICS = ("a", "b")
INVISIBLE_MS = 5_000


@dataclass
class Model:
    topic: str
    due: int
    body: bytes
    state: MessageState = MessageState.PENDING


class EngineVersusModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-model-"))
        self.clock = FakeClock(START_MS)
        self.engine = self._open()
        self.msgs: dict[str, Model] = {}
        self.acked: set[str] = set()
        self.received: set[str] = set()
        self.counter = 0

    def _open(self) -> Engine:
        settings_ = small_settings(self.dir, slot_limit=10_000)
        return Engine(settings_, self.clock, background=False).start()

    def _settle_model(self) -> None:
        now = self.clock.now_ms()
        for m in self.msgs.values():
            if m.state is MessageState.PENDING and m.due <= now:
                m.state = MessageState.DELIVERED

    @rule(
        topic=st.sampled_from(TOPICS),
        delays=st.lists(
            st.one_of(st.integers(0, 3_000), st.integers(9_000, 40_000)), min_size=1, max_size=6
        ),
    )
    def schedule(self, topic: str, delays: list[int]) -> None:
        reqs = []
        for d in delays:
            self.counter += 1
            reqs.append(ScheduleRequest(topic=topic, body=b"m%d" % self.counter, delay_ms=d))
        for r, out in zip(reqs, self.engine.schedule(reqs), strict=True):
            assert out.error is None and out.id is not None
            assert out.deliver_at_ms == self.clock.now_ms() + (r.delay_ms or 0)
            self.msgs[out.id] = Model(topic, out.deliver_at_ms, r.body)

    @precondition(lambda self: self.msgs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        mid = data.draw(st.sampled_from(sorted(self.msgs)))
        m = self.msgs[mid]
        expected = {
            MessageState.PENDING: CancelOutcome.CANCELLED,
            MessageState.DELIVERED: CancelOutcome.ALREADY_DELIVERED,
            MessageState.CANCELLED: CancelOutcome.ALREADY_CANCELLED,
            MessageState.RESCHEDULED: CancelOutcome.ALREADY_CANCELLED,
        }[m.state]
        assert self.engine.cancel([mid]) == [expected]
        if m.state is MessageState.PENDING:
            m.state = MessageState.CANCELLED

    @precondition(lambda self: self.msgs)
    @rule(data=st.data(), delay=st.integers(0, 30_000))
    def reschedule(self, data: st.DataObject, delay: int) -> None:
        mid = data.draw(st.sampled_from(sorted(self.msgs)))
        m = self.msgs[mid]
        if m.state is not MessageState.PENDING:
            try:
                self.engine.reschedule(mid, delay_ms=delay)
            except FailedPrecondition:
                return
            raise AssertionError("reschedule of a non-pending message must fail")
        out = self.engine.reschedule(mid, delay_ms=delay)
        assert out.id is not None
        m.state = MessageState.RESCHEDULED
        self.msgs[out.id] = Model(m.topic, self.clock.now_ms() + delay, m.body)

    @rule(ms=st.one_of(st.integers(0, 300), st.integers(300, 15_000)))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.engine.pump()
        self._settle_model()

    @rule(topic=st.sampled_from(TOPICS), ack=st.booleans())
    def receive(self, topic: str, ack: bool) -> None:
        got = self.engine.receive(topic, "g", max_messages=1000, invisible_ms=INVISIBLE_MS)
        for msg in got:
            m = self.msgs[msg.id]
            assert msg.id not in self.acked, "an acked message came back"
            assert m.state is MessageState.DELIVERED, f"{m.state} message was received"
            assert (msg.topic, msg.body, msg.deliver_at_ms) == (m.topic, m.body, m.due)
            assert msg.delivered_ms >= msg.deliver_at_ms, "delivered early"
            self.received.add(msg.id)
        if ack and got:
            outcomes = self.engine.ack(topic, "g", [m.receipt for m in got])
            assert outcomes == [AckOutcome.ACKED] * len(got)
            self.acked.update(m.id for m in got)

    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        if kill:
            self.engine.abandon()
        else:
            self.engine.close()
        self.engine = self._open()
        self.engine.pump()
        self._settle_model()

    @invariant()
    def lookups_agree(self) -> None:
        for mid in sorted(self.msgs)[-8:]:
            assert self.engine.lookup(mid).state is self.msgs[mid].state, mid

    @invariant()
    def counts_agree(self) -> None:
        by_topic = {s.topic: s for s in self.engine.stats()}
        for topic in TOPICS:
            mine = [m for m in self.msgs.values() if m.topic == topic]
            got = by_topic.get(topic)
            pending = sum(1 for m in mine if m.state is MessageState.PENDING)
            cancelled = sum(1 for m in mine if m.state is MessageState.CANCELLED)
            if got is None:
                assert pending == cancelled == 0
                continue
            assert (got.pending, got.cancelled) == (pending, cancelled)
            assert sum(c for _, c in got.due) == pending, "the due histogram covers all pending"
            assert all(c >= 0 for _, c in got.due)

    def teardown(self) -> None:
        try:
            self.clock.advance(45_000)
            self.engine.pump()
            self._settle_model()
            for _ in range(3):  # unacked ones come back after the invisibility timeout
                self.clock.advance(INVISIBLE_MS + 1)
                for topic in TOPICS:
                    self.receive(topic, ack=True)
            delivered = {i for i, m in self.msgs.items() if m.state is MessageState.DELIVERED}
            assert self.received == delivered, "every due message is received, nothing else"
            assert self.engine.observing.counters["early"] == 0
            self.engine.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


TestEngineVersusModel = EngineVersusModel.TestCase
TestEngineVersusModel.pytestmark = [pytest.mark.long]
TestEngineVersusModel.settings = settings(
    max_examples=size("DELAYQ_MODEL_EXAMPLES", ci=60, long=500),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
