"""Property test of keys: random schedules (every ``if_exists`` mode, dedup ids,
dedup windows), cancels, reschedules and lookups by key, deliveries (the fake
clock advanced), clean restarts and kills, checked against a plain model: the
pending messages of each key, oldest first, and every schedule's answer."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from delayq import Engine, FakeClock, NotFound
from delayq.errors import AlreadyExists
from delayq.types import IfExists, KeyOutcome, ScheduleRequest
from tests.support.engines import START_MS, small_settings
from tests.support.sizes import size

KEYS = ("a", "b", "c")
DEDUPS = ("", "", "m1", "m2")
WINDOWS = (0, 0, 2_000, 20_000)


@dataclass
class Msg:
    key: str
    dedup: str
    due: int
    hold: int  # accepted + window (0: none)
    pending: bool = True


class KeysVersusModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-keys-"))
        self.clock = FakeClock(START_MS)
        self.engine = self._open()
        self.msgs: dict[str, Msg] = {}  # by id, in the order made (= position order)

    def _open(self) -> Engine:
        return Engine(small_settings(self.dir), self.clock, background=False).start()

    # the model's answers
    def _holders(self, name: str, *, dedup: bool = False) -> list[str]:
        """The messages holding ``name``: pending ones first, then those ended in
        their window, each part oldest first (the first answers)."""
        now = self.clock.now_ms()
        named = [(i, m) for i, m in self.msgs.items() if (m.dedup if dedup else m.key) == name]
        return [i for i, m in named if m.pending] + [
            i for i, m in named if not m.pending and m.hold > now
        ]

    def _pending(self, key: str) -> list[str]:
        return [i for i, m in self.msgs.items() if m.key == key and m.pending]

    def _settle(self) -> None:
        now = self.clock.now_ms()
        for m in self.msgs.values():
            if m.pending and m.due <= now:
                m.pending = False

    @rule(
        rows=st.lists(
            st.tuples(
                st.sampled_from(KEYS),
                st.sampled_from(list(IfExists)),
                st.sampled_from(DEDUPS),
                st.sampled_from(WINDOWS),
                st.integers(0, 8_000),
            ),
            min_size=1,
            max_size=4,
        )
    )
    def schedule(self, rows: list[tuple[str, IfExists, str, int, int]]) -> None:
        reqs = []
        for key, mode, dedup, window, delay in rows:
            if window and not (mode or dedup):
                window = 0  # a window needs a mode or a dedup id
            reqs.append(
                ScheduleRequest(
                    topic="t",
                    body=b"x",
                    key=key,
                    delay_ms=delay,
                    if_exists=mode,
                    dedup_id=dedup,
                    dedup_window_ms=window,
                )
            )
        now = self.clock.now_ms()
        for r, out in zip(reqs, self.engine.schedule(reqs), strict=True):
            held = self._holders(r.dedup_id, dedup=True) if r.dedup_id else []
            if held:
                assert (out.id, out.key_outcome, out.error) == (held[0], KeyOutcome.KEPT, None)
                continue
            held = self._holders(r.key) if r.if_exists else []
            if held and r.if_exists in (IfExists.REJECT, IfExists.KEEP):
                assert out.id == held[0]
                if r.if_exists is IfExists.REJECT:
                    assert out.key_outcome is KeyOutcome.EXISTS
                    assert isinstance(out.error, AlreadyExists) and out.error.id == held[0]
                else:
                    assert (out.key_outcome, out.error) == (KeyOutcome.KEPT, None)
                continue
            replaced = self._pending(r.key) if r.if_exists is IfExists.REPLACE else []
            assert out.error is None and out.id is not None and out.id not in self.msgs
            assert out.key_outcome is (KeyOutcome.REPLACED if replaced else KeyOutcome.NEW)
            for i in replaced:
                self.msgs[i].pending = False
            hold = now + r.dedup_window_ms if r.dedup_window_ms else 0
            self.msgs[out.id] = Msg(r.key, r.dedup_id, now + (r.delay_ms or 0), hold)

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3))
    def cancel(self, keys: list[str]) -> None:
        want = []
        for key in keys:
            gone = self._pending(key)
            want.append(len(gone))
            for i in gone:
                self.msgs[i].pending = False
        assert self.engine.cancel_keys("t", keys) == want

    @rule(key=st.sampled_from(KEYS), delay=st.integers(0, 8_000))
    def reschedule(self, key: str, delay: int) -> None:
        olds = self._pending(key)
        if not olds:
            with pytest.raises(NotFound):
                self.engine.reschedule_key("t", key, delay_ms=delay)
            return
        outs = self.engine.reschedule_key("t", key, delay_ms=delay)
        assert len(outs) == len(olds)
        now = self.clock.now_ms()
        for old, out in zip(olds, outs, strict=True):
            m = self.msgs[old]
            m.pending = False
            assert out.id is not None and out.id not in self.msgs
            self.msgs[out.id] = Msg(key, m.dedup, now + delay, m.hold)  # its hold unchanged

    @rule(ms=st.one_of(st.integers(0, 300), st.integers(300, 12_000)))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.engine.pump()
        self._settle()

    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        if kill:
            self.engine.abandon()
        else:
            self.engine.close()
        self.engine = self._open()
        self.engine.pump()
        self._settle()

    @invariant()
    def lookups_agree(self) -> None:
        for key in KEYS:
            try:
                got = [r.id for r in self.engine.lookup_key("t", key)]
            except NotFound:
                got = []
            assert got == self._pending(key), key

    def teardown(self) -> None:
        try:
            self.engine.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


TestKeysVersusModel = KeysVersusModel.TestCase
TestKeysVersusModel.settings = settings(
    max_examples=size("DELAYQ_KEYS_MODEL_EXAMPLES", ci=40, long=400),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
