"""An export snapshot left unused ends by itself (``server.exports``), once unused
for its idle time on the engine's clock: real time passing alone ends none."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from delayq import Engine, FakeClock
from delayq.server.exports import Exports
from tests.support.engines import ids, req, small_settings

IDLE_S = 0.05  # the sweep looks this often (real time), and ends what is idle this long


def test_an_unused_snapshot_ends_once_idle_on_the_engines_clock(
    tmp_path: Path, clock: FakeClock
) -> None:
    engine = Engine(small_settings(tmp_path / "n"), clock, background=False).start()
    exports = Exports(engine.moving, idle_s=IDLE_S)

    async def main() -> None:
        ids(engine.schedule([req(60_000)]))
        plan = await exports.begin(0, "master")
        assert plan.pending == 1 and exports.count == 1
        await asyncio.sleep(4 * IDLE_S)  # sweeps look meanwhile; the clock stands still
        assert exports.count == 1, "real time is not the engine's: not idle yet"
        clock.advance(int(IDLE_S * 1000) + 1)
        deadline = time.monotonic() + 10
        while exports.count and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert exports.count == 0, "idle on the engine's clock: ended by the sweep"

    try:
        asyncio.run(main())
    finally:
        exports.close()
        engine.close()
