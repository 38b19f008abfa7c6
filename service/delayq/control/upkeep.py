"""Keeping a shard's recorded in-sync set current (``keep_insync``), once a round
while its master is in office and the round's action changed nothing.

The rules of who joins and who may leave are ``membership``'s; this is their
order of writes. Growing: the larger set is recorded first and the next probe
tells the master (a member it does not count yet only makes the record stricter).
Shrinking: the master is told the smaller set first and the set is recorded only
once the master answers in office counting no more than it (until then the
record, from which a failover elects, still holds the leaver). One change a round.
"""

from __future__ import annotations

import dataclasses

from .ledger import Ledger, log
from .membership import counts_in, in_office, joiners, leaver
from .probing import Probes
from .views import Answer

__all__ = ["keep_insync"]


def keep_insync(
    ledger: Ledger,
    probes: Probes,
    master: Answer,
    sent_ms: int,
    *,
    now_ms: int,
    lease_ms: int,
    min_insync: int,
    sync: bool,
    retiring: frozenset[str],
) -> None:
    """``master``: the recorded master's answer to the round sent at ``sent_ms``."""
    rec = ledger.record
    watches = probes.watches
    answers = probes.answers()
    for r in master.replicas:
        if r.name in watches:
            watches[r.name].note_flushed(rec.epoch, r.flushed)
    probes.in_sync_since(
        sent_ms,
        [n for n in watches if n == rec.master or counts_in(n, rec.epoch, master, answers.get(n))],
    )
    join = joiners(rec.epoch, rec.master, rec.insync, master, answers) - retiring
    if join:
        if ledger.save(dataclasses.replace(rec, insync=rec.insync | join)):
            now_in = sorted(ledger.record.insync)
            log.info(
                "shard %d: %s joined the in-sync set, now %s",
                ledger.shard,
                ", ".join(sorted(join)),
                now_in,
                extra=ledger.fields(insync=now_in),
            )
            ledger.event(
                "InSyncChanged",
                f"shard {ledger.shard}: {', '.join(sorted(join))} joined; in sync: "
                f"{', '.join(now_in)}",
            )
        return
    out = leaver(
        rec.epoch,
        rec.master,
        rec.insync,
        master,
        watches,
        now_ms=now_ms,
        lease_ms=lease_ms,
        min_insync=min_insync,
        sync=sync,
        retiring=retiring,
        started_ms=ledger.office_since_ms,
    )
    if out is None:
        return
    smaller = rec.insync - {out}
    told = probes.tell(rec.master, rec, smaller)
    if told is None or not in_office(told, rec.epoch):
        return
    if not told.insync <= smaller:
        log.warning(
            "shard %d: the master still counts %s after being told %s",
            ledger.shard,
            sorted(told.insync),
            sorted(smaller),
        )
        return
    if ledger.save(dataclasses.replace(rec, insync=smaller)):
        log.warning(
            "shard %d: %s left the in-sync set (out of touch for over %d ms), now %s",
            ledger.shard,
            out,
            lease_ms,
            sorted(smaller),
            extra=ledger.fields(node=out, insync=sorted(smaller)),
        )
        ledger.event(
            "InSyncChanged",
            f"shard {ledger.shard}: {out} left (out of touch for over {lease_ms} ms); "
            f"in sync: {', '.join(sorted(smaller))}",
        )
