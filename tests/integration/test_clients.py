"""The async client and the batching producer against a real server process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from delayq import AsyncClient, Client, Outgoing
from delayq.client import AckOutcome, CancelOutcome, MessageState
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]


def test_async_client_round_trip(start_server: Start) -> None:
    srv = start_server()

    async def main() -> None:
        async with AsyncClient(srv.address) as c:
            out = await c.schedule_many(
                [Outgoing(topic="t", body=b"%d" % i, delay=0.2) for i in range(20)]
            )
            assert all(o.ok for o in out)
            gone = await c.schedule("t", b"never", delay=60)
            assert await c.cancel(gone.id) == [CancelOutcome.CANCELLED]
            assert (await c.lookup(gone.id)).state is MessageState.CANCELLED
            got: list[bytes] = []
            deadline = time.time() + 5
            while len(got) < 20 and time.time() < deadline:
                msgs = await c.receive("t", "g", max_messages=100, wait_s=1)
                got += [m.body for m in msgs]
                if msgs:
                    assert set(await c.ack("t", "g", [m.receipt for m in msgs])) == {
                        AckOutcome.ACKED
                    }
            assert sorted(got) == sorted(b"%d" % i for i in range(20))
            assert (await c.stats("t")).topics[0].cancelled == 1
            await c.schedule_many(
                [Outgoing(topic="s", body=b"%d" % i, delay=0.1) for i in range(5)]
            )
            streamed: list[bytes] = []
            async for batch in c.subscribe("s", "g", wait_s=0.1):  # at-least-once: ack
                streamed += [m.body for m in batch]
                assert set(await c.ack("s", "g", [m.receipt for m in batch])) == {AckOutcome.ACKED}
                if len(streamed) == 5:
                    break
            assert sorted(streamed) == [b"%d" % i for i in range(5)]

    asyncio.run(main())


def test_producer_batches_single_sends(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c, c.producer(max_batch=50, linger_s=0.01) as p:
        futures = [p.send("t", b"%d" % i, delay=60) for i in range(500)]
        p.flush()
        results = [f.result(timeout=5) for f in futures]
    assert all(r.ok for r in results)
    assert len({r.id for r in results}) == 500
    with Client(srv.address) as c:
        assert c.stats("t").topics[0].pending == 500
