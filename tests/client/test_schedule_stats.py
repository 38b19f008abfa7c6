"""Stats of recurring schedules through a real ``delayq serve``: the schedules a
shard holds, the nominal times fired and missed, the firings' lateness, in the
typed client's ``Stats.schedules`` (and each shard's), ``delayq stats``'s text
(a node that holds none says nothing of them) and the node's /metrics."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

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
        fired = client.stats().schedules.firings
    scraped = _samples(srv.metrics_address())
    assert scraped["delayq_schedules"] == 1
    assert scraped["delayq_schedule_firings_total"] >= fired >= 4
    assert scraped["delayq_schedule_lateness_seconds_count"] >= fired
    assert scraped["delayq_schedule_missed_total"] == 0


def _samples(address: str) -> dict[str, float]:
    """Each unlabelled sample of the node's /metrics (histograms' _count and _sum)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        s.name: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if not s.labels
    }
