"""A shard's replication metadata as its control plane records it (pure): the
epoch, the master's name and the in-sync set the failover decision works from,
with the failovers counted, the last reason the shard could not fail over, and
whether the recorded master has taken office. The local cluster keeps it in
``cluster.json``, the operator in the DelayTopic's status; both write it before
a promotion is sent (see ``keeper``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["RECORD_OPTIONAL", "ShardRecord"]

RECORD_OPTIONAL = frozenset({"failovers", "stuck", "in_office"})
"""Keys a record may lack (written before they existed): their defaults apply."""


@dataclass(frozen=True, kw_only=True)
class ShardRecord:
    shard: int
    epoch: int
    master: str
    """The master's node name (``node-K``)."""
    insync: frozenset[str]
    failovers: int = 0
    stuck: str = ""
    in_office: bool = True
    """The master took office at this epoch (seen answering as its master); False
    from the recording of a promotion until then. A master that never took office
    is started as a replica, so that the decision promotes it again."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "insync", frozenset(self.insync))
        if self.epoch < 1 or not self.master:
            raise ValueError(f"shard {self.shard}: epoch must be >= 1 and master named")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "insync": sorted(self.insync)}

    @classmethod
    def from_json(cls, doc: Any) -> ShardRecord:
        """The record from its JSON form; ``ValueError`` saying what is wrong."""
        names = set(cls.__dataclass_fields__)
        if not isinstance(doc, dict) or not names - RECORD_OPTIONAL <= set(doc):
            raise ValueError(f"not a record with the keys {sorted(names)}")
        fields = {k: doc[k] for k in names if k in doc}
        if not isinstance(fields["insync"], list) or not all(
            isinstance(n, str) for n in fields["insync"]
        ):
            raise ValueError("insync must be a list of node names")
        if not isinstance(fields.get("in_office", True), bool):
            raise ValueError("in_office must be true or false")
        for key in ("shard", "epoch", "failovers"):
            if key in fields and (
                not isinstance(fields[key], int) or isinstance(fields[key], bool)
            ):
                raise ValueError(f"{key} must be an integer")
        try:
            return cls(**fields)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
