"""The state map does not grow with history: once retention deleted the CommitLog
segments of a chunk's messages and they are all done, the chunk's file goes
(``StateMap.sweep``), across restarts and kills, while a message still pending in
an old chunk keeps that chunk and arrives once. Chunks of 16 messages here."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq import Engine, FakeClock, NotFound
from delayq.engine import CancelOutcome, MessageState
from delayq.store import statemap
from tests.support.engines import SMALL, Make, churn, drain, ids, req, run_until

BITS = 4


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statemap, "CHUNK_BITS", BITS)


def chunk_files(e: Engine) -> list[int]:
    return sorted(int(p.stem) for p in (e.settings.data_dir / "state").glob("*.map"))


def test_done_chunks_go_and_a_pending_one_stays_until_its_message_is_done(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(retention_ms=5_000, **SMALL)
    (far,) = ids(e.schedule([req(45_000, b"far")]))  # seq 0: chunk 0
    (gone,) = ids(e.schedule([req(30_000, b"cancelled")]))  # chunk 0 too
    assert e.cancel([gone]) == [CancelOutcome.CANCELLED]
    churn(e, clock, 30)  # 150 messages: chunks 0..9, delivered, then past retention
    made = e.inspect().next_seq >> BITS
    retired = e.inspect().states.retired
    assert e.observing.counters["state_chunks_retired"] == len(retired) > 0
    assert 0 not in retired, "its message is still pending"
    assert set(chunk_files(e)) == set(range(made + 1)) - retired
    assert e.inspect().states.open_chunks <= 3, "the idle ones are closed"
    assert e.lookup(far).state is MessageState.PENDING  # from the kept record
    e.close()
    e = make_engine(retention_ms=5_000, **SMALL)  # the retired ones stay retired
    assert e.inspect().states.retired == retired and 0 not in retired
    run_until(e, clock, clock.now_ms() + 20_000, step_ms=500)
    assert [m.body for m in drain(e)] == [b"far"], "once, and the cancelled one never"
    churn(e, clock, 25)  # now chunk 0 is all done: once its kept records go, so does it
    assert 0 in e.inspect().states.retired and 0 not in chunk_files(e)
    with pytest.raises(NotFound):
        e.lookup(far)
    assert not drain(e)


def test_a_kill_after_retiring_loses_and_resurrects_nothing(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(retention_ms=5_000, **SMALL)
    churn(e, clock, 30)
    assert e.inspect().states.retired
    pending = ids(e.schedule([req(3_000, b"p%d" % i) for i in range(40)]))  # 2+ new chunks
    assert e.cancel(pending[::2]) == [CancelOutcome.CANCELLED] * 20
    e.abandon()  # as after SIGKILL: nothing flushed since the last checkpoint
    e = make_engine(retention_ms=5_000, **SMALL)
    run_until(e, clock, clock.now_ms() + 5_000, step_ms=100)
    got = drain(e)
    assert sorted(m.body for m in got) == sorted(b"p%d" % i for i in range(1, 40, 2))
    churn(e, clock, 5)
    assert not [m for m in drain(e) if not m.body.startswith(b"y")], "nothing old comes back"
    # their chunks are full and done, but their records are not gone: ids still name
    # them, so the chunks stay and the answers stay exact
    assert e.lookup(pending[0]).state is MessageState.CANCELLED
    assert e.cancel(pending[:2]) == [
        CancelOutcome.ALREADY_CANCELLED,
        CancelOutcome.ALREADY_DELIVERED,
    ]


def test_a_state_dir_of_another_chunk_size_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    from tests.support.engines import small_settings

    settings = small_settings(tmp_path / "data", retention_ms=5_000, **SMALL)
    e = Engine(settings, clock, background=False).start()
    churn(e, clock, 30)
    assert e.inspect().states.retired
    e.close()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(statemap, "CHUNK_BITS", BITS + 1)
        with pytest.raises(Exception, match="chunks of 16 entries"):
            Engine(settings, clock, background=False).start()
