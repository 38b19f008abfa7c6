"""Export snapshots (``timers.rebalance.snapshot``): every message pending at the snapshot,
exactly once over all partitions, with its id, content and roll count; kept records
of deleted segments included; what changes after the snapshot does not show; and
retention waits while a snapshot is open."""

from __future__ import annotations

import pytest

from delayq import Engine, FailedPrecondition, FakeClock
from delayq.formats.headers import decode_headers
from delayq.ids import MessageId
from delayq.timers.rebalance.snapshot import ExportRows, ExportSnapshot
from tests.support.engines import SMALL, Make, churn, drain, ids, req, run_until


def read_all(e: Engine, snap: ExportSnapshot, rows: int = 7) -> dict[str, dict[str, object]]:
    """Every partition of ``snap``, as id -> row; fails on a message seen twice."""
    out: dict[str, dict[str, object]] = {}
    for start, end in snap.partitions:
        for batch in e.moving.export(snap, start, end, rows):
            assert len(batch) <= rows
            for mid, row in rows_of(snap.shard, batch):
                assert mid not in out, f"{mid} exported twice"
                out[mid] = row
    return out


def rows_of(shard: int, b: ExportRows) -> list[tuple[str, dict[str, object]]]:
    return [
        (
            str(MessageId(shard, int(b.epochs[i]), int(b.positions[i]))),
            {
                "topic": b.topics[i],
                "key": b.keys[i],
                "headers": decode_headers(b.headers[i]),
                "body": b.bodies[i],
                "due": int(b.deliver_at_ms[i]),
                "rolls": int(b.roll_counts[i]),
            },
        )
        for i in range(len(b))
    ]


def test_a_snapshot_holds_each_pending_message_once(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine(retention_ms=2_000, **SMALL)
    t0 = clock.now_ms()
    far = ids(
        e.schedule(
            [req(60_000 + i, b"far%d" % i, key=f"k{i}", headers={"h": str(i)}) for i in range(6)]
        )
    )
    churn(e, clock, 25)  # the far ones roll, their first segment goes: kept records
    assert e.observing.counters["records_kept"] >= 6
    near = ids(e.schedule([req(5_000 + i, b"near%d" % i, topic="u") for i in range(40)]))
    soon = ids(e.schedule([req(10, b"soon")]))
    gone = ids(e.schedule([req(20_000, b"gone")]))
    e.cancel(gone)
    moved = e.reschedule(near[0], delay_ms=7_000)
    assert moved.id is not None
    run_until(e, clock, clock.now_ms() + 300, step_ms=100)
    assert [m.id for m in drain(e)] == soon

    snap = e.moving.begin_export(partition_bytes=2_000)
    assert len(snap.partitions) > 3, snap.partitions
    starts = [p[0] for p in snap.partitions]
    assert starts == sorted(starts) and snap.partitions[0][0] == 0, "kept ones come first"
    e.cancel([near[1]])  # after the snapshot: it still shows
    got = read_all(e, snap)
    e.moving.end_export(snap)
    pending = set(far) | set(near[1:]) | {moved.id}
    assert set(got) == pending
    assert snap.pending == len(pending)
    for i, mid in enumerate(far):
        row = got[mid]
        assert (row["topic"], row["key"], row["body"]) == ("t", f"k{i}", b"far%d" % i)
        assert row["headers"] == {"h": str(i)}
        assert row["due"] == t0 + 60_000 + i
        assert int(row["rolls"]) >= 2, "rolled once per 10 s window"  # type: ignore[call-overload]
    assert got[near[5]]["topic"] == "u" and got[near[5]]["rolls"] == 0
    assert got[moved.id]["body"] == b"near0"
    with pytest.raises(FailedPrecondition, match="released"):
        list(e.moving.export(snap, *snap.partitions[0], 10))


def test_retention_waits_while_a_snapshot_is_open(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine(retention_ms=1_000, **SMALL)
    ids(e.schedule([req(90_000, b"far")]))
    snap = e.moving.begin_export(partition_bytes=1 << 20)
    deleted = e.observing.counters["commitlog_segments_deleted"]
    churn(e, clock, 15)
    assert e.observing.counters["commitlog_segments_deleted"] == deleted, (
        "nothing goes while it is open"
    )
    assert len(read_all(e, snap)) == 1
    e.moving.end_export(snap)
    e.moving.end_export(snap)  # twice is harmless
    churn(e, clock, 15)
    assert e.observing.counters["commitlog_segments_deleted"] > deleted


def test_an_empty_shard_exports_nothing(make_engine: Make) -> None:
    e = make_engine()
    snap = e.moving.begin_export(partition_bytes=1 << 20)
    assert snap.pending == 0
    assert read_all(e, snap) == {}
    e.moving.end_export(snap)


def test_a_snapshot_since_an_earlier_one_holds_what_was_written_since(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(**SMALL)
    old = ids(e.schedule([req(60_000 + i, b"old%d" % i) for i in range(20)]))
    first = e.moving.begin_export(partition_bytes=2_000)
    e.moving.end_export(first)
    new = ids(e.schedule([req(60_000 + i, b"new%d" % i) for i in range(5)]))
    e.cancel([old[0]])
    later = e.moving.begin_export(partition_bytes=2_000, since=first.position)
    assert later.since == first.position
    assert all(a >= first.position for a, _ in later.partitions)
    assert set(read_all(e, later)) == set(new), "only what was written since"
    e.moving.end_export(later)
    whole = e.moving.begin_export(partition_bytes=2_000, since=first.position + 10**9)
    assert whole.since == 0, "a position past the end: all of it"
    assert set(read_all(e, whole)) == set(old[1:]) | set(new)
    e.moving.end_export(whole)
