"""A soak of mixed network faults over three shards: every few seconds a random
nemesis (``nemeses.NEMESES``, SIGSTOP of a master, a slow control-plane link) hits
a random shard for 1-2 leases, then heals for 1-2 leases, while the queue workload
runs at about 200 messages a second; then a heal, a drain, and the same checks as
``test_nemeses``, with a line per nemesis: acknowledged schedules, lost, early,
broken cancels, duplicates, time without a write on the shard hit (median, max)
and two deliverers.

CI size: lease 1 s, 40 s of faults. Long (``pytest --long``, or
``DELAYQ_PARTITION_SOAK_S=1800``): lease 3 s, 30 min of faults, a drain of at
least 10 min."""

from __future__ import annotations

import itertools
import os
import random
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from bench.queuecheck import History, check

from delayq.ids import MessageId
from tests.partition.nemeses import NEMESES
from tests.partition.rig import Rig
from tests.support.sizes import long_run, size

SOAK_S = size("DELAYQ_PARTITION_SOAK_S", ci=40, long=1800)
DRAIN_S = size("DELAYQ_PARTITION_DRAIN_S", ci=0, long=600)
LEASE_MS = 3000 if long_run() else 1000

pytestmark = [
    pytest.mark.partition,
    pytest.mark.long,
    pytest.mark.timeout(SOAK_S + DRAIN_S + 600),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]


def _slow_then_cut(rig: Rig, rng: random.Random, shard: int) -> None:
    m = rig.master(shard)
    rig.net.delay("cp", m, int(rng.choice((0.3, 0.5, 1.5)) * LEASE_MS))
    time.sleep(LEASE_MS / 1000)
    rig.net.cut("cp", m)


def _pause(rig: Rig, rng: random.Random, shard: int) -> None:
    rig.pause(rig.master(shard), True)


KINDS = [*sorted(NEMESES), "slow-then-cut", "sigstop"]


def test_a_soak_of_mixed_faults_over_three_shards(tmp_path: Path) -> None:
    rng = random.Random(11)
    lease_s = LEASE_MS / 1000
    windows: list[tuple[str, int, float, float]] = []  # (kind, shard, start ms, end ms)
    with Rig(tmp_path, shards=3, lease_ms=LEASE_MS, batch=20) as rig:
        end = time.monotonic() + SOAK_S
        while time.monotonic() < end:
            kind, shard = rng.choice(KINDS), rng.randrange(3)
            paused = rig.master(shard) if kind == "sigstop" else None
            start = time.time() * 1000
            if kind == "slow-then-cut":
                _slow_then_cut(rig, rng, shard)
            elif paused is not None:
                _pause(rig, rng, shard)
            else:
                NEMESES[kind](rig, rng, shard)
            time.sleep(rng.uniform(1, 2) * lease_s)
            rig.net.heal()
            if paused is not None:
                rig.pause(paused, False)
            for n in rig.shard_nodes(shard):
                rig.net.delay("cp", n, 0)
            time.sleep(rng.uniform(1, 2) * lease_s)
            windows.append((kind, shard, start, time.time() * 1000))
        time.sleep(DRAIN_S)
        f = rig.finish("soak")
        print(f.line())
        history = History.from_json(rig.history_file.read_text())
    for line in _per_nemesis(history, windows):
        print(line)
    c = f.counts
    assert (c["lost"], c["early"], c["cancel_broken"]) == (0, 0, 0), c
    assert f.late_acks == [], "acknowledged on a call sent after a later epoch was recorded"
    assert f.two_deliverers == [], "two nodes delivering at once"


def _per_nemesis(h: History, windows: list[tuple[str, int, float, float]]) -> list[str]:
    """A line per nemesis: what was acknowledged on calls sent in its windows, what
    of that was lost, early or broken, and the longest time without an ack on the
    shard it hit."""
    found = check(h)
    lost, broken = set(found["lost_ids"]), set(found["cancel_broken_ids"])
    early = {mid for mid, at, due in h.received if at < due}
    times = Counter(mid for mid, _, _ in h.received)
    dups = {mid for mid, n in times.items() if n > 1}
    by_shard: dict[int, list[int]] = defaultdict(list)
    for mid, at in h.acked_at.items():
        by_shard[MessageId.parse(mid).shard].append(at)
    for acks in by_shard.values():
        acks.sort()
    rows: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for kind, shard, start, stop in windows:
        ids = [m for m, sent in h.acked_sent.items() if start <= sent < stop]
        row = rows[kind]
        row["acked"].append(len(ids))
        for name, bad in (("lost", lost), ("early", early), ("broken", broken), ("dup", dups)):
            row[name].append(sum(1 for m in ids if m in bad))
        inside = [a for a in by_shard[shard] if start <= a < stop]
        edges = [int(start), *inside, int(stop)]
        row["unwritable"].append(max(b - a for a, b in itertools.pairwise(edges)))
    out = []
    for kind, row in sorted(rows.items()):
        gaps = row["unwritable"]
        out.append(
            f"{kind}: {len(gaps)} faults, acked {sum(row['acked'])}, lost {sum(row['lost'])}, "
            f"early {sum(row['early'])}, broken cancels {sum(row['broken'])}, "
            f"duplicated {sum(row['dup'])}, without a write on the shard hit: median "
            f"{int(statistics.median(gaps))} ms, max {max(gaps)} ms"
        )
    return out
