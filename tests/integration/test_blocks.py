"""The admin ``AddBlock`` over a real ``delayq serve`` process whose wheel window
is 2 s: rolled far-future messages read from an export snapshot go into a block;
each is delivered once, not before its time; a cancelled one never; a lookup
says pending; the block sent again changes nothing; bad calls are
INVALID_ARGUMENT naming the field; the metrics count it."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.client import Client, Outgoing
from tests.support.receiving import receive_each_once
from tests.support.servers import ServerProcess

ARGS = ["--window", "2s", "--precision", "100ms", "--flush-interval", "100ms"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path / "data", ARGS).start()
    try:
        yield s
    finally:
        s.stop()


def exported(stub: arpc.ShardAdminStub) -> list[tuple[str, str, int, int, bool]]:
    """(id, topic, due, rolls, blocked) of every message an export snapshot lists."""
    plan = stub.BeginExport(apb.BeginExportRequest(), timeout=10)
    rows = []
    try:
        for part in plan.partitions:
            req = apb.ExportRequest(snapshot=plan.snapshot, start=part.start, end=part.end)
            for b in stub.Export(req, timeout=10):
                rows += zip(b.ids, b.topics, b.deliver_at_ms, b.roll_counts, b.blocked, strict=True)
    finally:
        stub.EndExport(apb.EndExportRequest(snapshot=plan.snapshot), timeout=10)
    return rows


def test_add_block_over_the_admin_api(server: ServerProcess) -> None:
    channel = grpc.insecure_channel(server.admin_address)
    stub = arpc.ShardAdminStub(channel)
    with channel, Client(server.address, timeout_s=10) as client:
        now = int(time.time() * 1000)
        start = (now + 9_000) // 1000 * 1000
        sent = {
            s.id: s.deliver_at_ms
            for s in client.schedule_many(
                [Outgoing(topic="far", body=b"b%d" % i, at=start + 300 * i) for i in range(10)]
            )
        }
        time.sleep(2.5)  # a window: each has rolled once
        rows = [r for r in exported(stub) if r[3] > 0]
        assert len(rows) == 10 and not any(r[4] for r in rows)
        req = apb.AddBlockRequest(
            job="it",
            start_ms=start,
            end_ms=start + 10_000,
            rows=[
                apb.BlockedMessage(id=i, topic=t, deliver_at_ms=d, roll_count=n)
                for i, t, d, n, _ in rows
            ],
        )
        out = stub.AddBlock(req, timeout=10)
        assert [r.outcome for r in out.results] == [apb.BLOCK_OUTCOME_BLOCKED] * 10
        assert all(r[4] for r in exported(stub)), "exports flag them"
        again = stub.AddBlock(req, timeout=10)
        assert [r.outcome for r in again.results] == [apb.BLOCK_OUTCOME_ALREADY_BLOCKED] * 10
        first = rows[0][0]
        assert client.lookup(first).state == "pending"
        assert client.cancel(rows[1][0]) == ["cancelled"]
        for field, bad in (
            (
                "start_ms",
                apb.AddBlockRequest(job="it", start_ms=now, end_ms=now + 1, rows=req.rows),
            ),
            ("end_ms", apb.AddBlockRequest(job="it", start_ms=start, end_ms=start, rows=req.rows)),
            (
                "rows",
                apb.AddBlockRequest(
                    job="it", start_ms=start, end_ms=start + 1, rows=[req.rows[0]] * 10_001
                ),
            ),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                stub.AddBlock(bad, timeout=10)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert (refused.value.details() or "").startswith(field)
        got = receive_each_once(client, "far", "g", sent, 9, timeout_s=30, batch=10)
        assert set(got) == set(sent) - {rows[1][0]}
        with urllib.request.urlopen(f"http://{server.metrics_address()}/metrics") as page:
            text = page.read().decode()
        assert "delayq_blocked_total 10.0" in text
        assert "delayq_loaded_total 9.0" in text
