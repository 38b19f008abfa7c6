"""How a shard gets its first master when every node starts as a replica (pure).

The operator starts all of a shard's pods alike (``--role replica``: a pod
cannot know from its spec whether it should lead) and records the shard as
epoch 1, master ``<shard>-0``, in-sync set of that node, not yet in office, no
failovers. Such a record is *unfounded*; the failover decision does not apply
to it (its master never took office, and a node without an epoch is no
candidate). ``founding`` says what to do instead:

* wait until every node of the shard answers (not recovering): a node still
  starting may hold the most data (a topic recreated on kept volumes);
* then promote the most caught-up node, by ``(epoch, flushed)``, ties to the
  recorded master, then by name; at the recorded epoch when that is above
  every epoch a node reports, else at the highest reported plus one (a node
  refuses a command below its own epoch). When that changes the master or the
  epoch, the caller records the new record first, as for any promotion.

A record that has taken office once, or counts a failover, is founded for
good: from then on only ``failover.decide`` moves its master.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from .record import ShardRecord
from .views import Answer

__all__ = ["Found", "Waiting", "founding", "unfounded"]


@dataclass(frozen=True)
class Found:
    """Promote ``record.master`` at ``record.epoch`` (record it first when it
    differs from the one held)."""

    record: ShardRecord


@dataclass(frozen=True)
class Waiting:
    reason: str


def unfounded(rec: ShardRecord) -> bool:
    """The record has never had a master in office (see the module notes)."""
    return not rec.in_office and rec.failovers == 0


def founding(rec: ShardRecord, answers: Mapping[str, Answer | None]) -> Found | Waiting:
    """The founding step for the unfounded ``rec``, given each node's last answer
    (None: it did not answer)."""
    silent = sorted(n for n, a in answers.items() if a is None or a.recovering)
    if silent:
        return Waiting(f"a new shard waits for every node to answer; not yet: {', '.join(silent)}")
    live = {n: a for n, a in answers.items() if a is not None}

    def rank(name: str) -> tuple[int, int, bool, str]:
        a = live[name]
        return (-a.epoch, -a.flushed, name != rec.master, name)

    best = min(live, key=rank)
    top = max(a.epoch for a in live.values())
    epoch = max(rec.epoch, top + 1)
    new = dataclasses.replace(rec, epoch=epoch, master=best, insync=frozenset({best}))
    return Found(new)
