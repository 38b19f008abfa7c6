"""Stats of recurring schedules through a real ``delayq serve``: the schedules a
shard holds, the nominal times fired and missed, the firings' lateness, in the
typed client's ``Stats.schedules`` (and each shard's) and ``delayq stats``'s
text; a node that holds none says nothing of them."""

from __future__ import annotations

import time
from collections.abc import Callable

from delayq import Client, MessageTemplate, ScheduleSpec
from tests.support.cluster import delayq_cli
from tests.support.servers import ServerProcess


def test_stats_count_schedules_and_their_firings(
    start_server: Callable[..., ServerProcess],
) -> None:
    srv = start_server()
    with Client(srv.address) as client:
        quiet = client.stats()
        assert (quiet.schedules.schedules, quiet.schedules.firings) == (0, 0)
        assert "recurring schedules" not in delayq_cli("stats", "--server", srv.address).stdout
        spec = ScheduleSpec(template=MessageTemplate(topic="ticks"), every_ms=1000)
        client.create_schedule("a", spec)
        client.create_schedule("b", spec)
        deadline = time.monotonic() + 30
        while (got := client.stats()).schedules.firings < 4:  # two of each
            assert time.monotonic() < deadline, got.schedules
            time.sleep(0.2)
        assert (got.schedules.schedules, got.schedules.missed) == (2, 0)
        assert got.shards[0].schedules == got.schedules  # one shard: the same
        assert got.schedules.lateness_ms_p99 >= got.schedules.lateness_ms_p50 >= 0
        client.delete_schedule("a")
        assert client.stats().schedules.schedules == 1
        text = delayq_cli("stats", "--server", srv.address).stdout
        assert "recurring schedules 1: " in text and " missed, firing lateness p50 " in text
