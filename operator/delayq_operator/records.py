"""Each shard's replication record as the DelayTopic's status holds it (pure).

``status.replication`` maps a shard's index (as a string) to its record: the
authoritative epoch, master (a pod name), in-sync set, failovers counted,
whether the master has taken office, why the shard cannot fail over (if so)
and when it last failed over. Only the shard keepers write it, by
compare-and-set on the resource version (``kube.Cluster.swap_record``); the
status rows a user reads (``status.shards``) are computed from it.

A shard without a record gets ``first_record``: its pod 0 as the master at
epoch 1, never in office, so that ``delayq.control.founding`` promotes the most
caught-up pod once all of them answer.

``scale_down_waits`` says why a smaller ``replicasPerShard`` cannot be applied
yet: a pod that would go is still the master or in the in-sync set (the keepers
move both off it first, see ``delayq.control.keeper``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from delayq.control.record import ShardRecord

from .crd import pod_name

__all__ = ["doc_of", "first_record", "leaving", "record_of", "records_of", "scale_down_waits"]

_FIELDS = {  # status key -> ShardRecord field
    "epoch": "epoch",
    "master": "master",
    "insync": "insync",
    "failovers": "failovers",
    "inOffice": "in_office",
    "stuck": "stuck",
}


def doc_of(rec: ShardRecord) -> dict[str, Any]:
    """The status form of ``rec`` (its shard is the key it is stored under)."""
    plain = rec.to_json()
    return {key: plain[field] for key, field in _FIELDS.items()}


def record_of(shard: int, doc: Any) -> ShardRecord:
    """The record stored for ``shard``; ``ValueError`` saying what is wrong."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"status.replication.{shard}: not an object")
    plain = {field: doc[key] for key, field in _FIELDS.items() if key in doc}
    try:
        return ShardRecord.from_json({**plain, "shard": shard})
    except ValueError as exc:
        raise ValueError(f"status.replication.{shard}: {exc}") from None


def records_of(status: Mapping[str, Any] | None) -> dict[int, ShardRecord]:
    """Every readable record of a topic's status, by shard (unreadable ones are
    left out: the keeper of such a shard refuses to start, saying why)."""
    out = {}
    for key, doc in ((status or {}).get("replication") or {}).items():
        if str(key).isdigit():
            try:
                out[int(key)] = record_of(int(key), doc)
            except ValueError:
                continue
    return out


def first_record(topic: str, shard: int) -> ShardRecord:
    """A new shard's record: pod 0 named, epoch 1, not in office (see above)."""
    first = pod_name(topic, shard, 0)
    return ShardRecord(
        shard=shard, epoch=1, master=first, insync=frozenset({first}), in_office=False
    )


def leaving(topic: str, shard: int, wanted: int, current: int) -> frozenset[str]:
    """The pods a StatefulSet scaled from ``current`` to ``wanted`` removes."""
    return frozenset(pod_name(topic, shard, r) for r in range(wanted, current))


def scale_down_waits(
    topic: str, wanted: int, current: Mapping[int, int], records: Mapping[int, ShardRecord]
) -> list[str]:
    """Why shards (index -> replicas now) cannot go down to ``wanted`` pods yet;
    empty when all may."""
    out = []
    for shard, now in sorted(current.items()):
        rec = records.get(shard)
        gone = leaving(topic, shard, wanted, now)
        if rec is None or not gone:
            continue
        if rec.master in gone:
            out.append(f"shard {shard}: {rec.master}, to be removed, is the master")
        elif rec.insync & gone:
            names = ", ".join(sorted(rec.insync & gone))
            out.append(f"shard {shard}: {names}, to be removed, still in the in-sync set")
    return out
