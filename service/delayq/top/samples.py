"""One look at every node of a cluster, for ``delayq top`` (pure values): a
``Sample`` holds, for every node of the shard map, what the sampler
(``sampler``) got from it: its health (``state``), its ``Stats`` and its admin
``Status``, each possibly missing (a node down or recovering, an admin port out
of reach). A node's role and epoch are its admin answer's, else its
``Stats.node``'s, else the map's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..client.results import ShardStats
from ..control.views import Answer
from ..role import Role

__all__ = ["SERVING", "NodeRef", "NodeSample", "Sample"]

SERVING = "serving"


@dataclass(frozen=True, kw_only=True)
class NodeRef:
    """A node as the shard map (and ``cluster.json``) name it."""

    shard: int
    address: str
    name: str = ""
    """Its name when known (``cluster.json``); else its admin answer's, else its address."""
    map_role: str = Role.MASTER
    """The role the shard map gives it."""
    map_epoch: int = 0

    def ref(self) -> dict[str, Any]:
        """Its ``NodeRef`` fields, to make another kind of ``NodeRef`` of the node."""
        return {f.name: getattr(self, f.name) for f in fields(NodeRef)}


@dataclass(frozen=True, kw_only=True)
class NodeSample(NodeRef):
    """What one node answered to one sample."""

    state: str = "down"
    """``serving``, ``recovering`` or ``down`` (``probe``)."""
    stats: ShardStats | None = None
    admin: Answer | None = None

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return self.admin.name if self.admin is not None and self.admin.name else self.address

    @property
    def named(self) -> bool:
        """Whether ``label`` is its name in its shard (not its address in its stead)."""
        return bool(self.name) or (self.admin is not None and bool(self.admin.name))

    @property
    def role(self) -> str:
        if self.admin is not None:
            return str(self.admin.role)
        if self.stats is not None:
            return str(self.stats.node.role)
        return str(self.map_role)

    @property
    def epoch(self) -> int:
        if self.admin is not None:
            return self.admin.epoch
        return self.stats.node.epoch if self.stats is not None else self.map_epoch

    @property
    def log_end(self) -> int | None:
        if self.admin is not None:
            return self.admin.log_end
        return self.stats.node.commitlog_end if self.stats is not None else None

    @property
    def fenced(self) -> bool:
        return self.admin is not None and self.admin.fenced

    @property
    def acting_master(self) -> bool:
        return self.state == SERVING and self.role == Role.MASTER and not self.fenced


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One look at every node of the cluster."""

    source: str
    """What was looked at: ``dir PATH`` or ``server ADDRESS``."""
    at_s: float
    """Monotonic seconds when it was taken (rates count from it)."""
    wall_ms: int
    """Unix ms when it was taken (shown)."""
    took_ms: int = 0
    topology_epoch: int = 0
    nodes: tuple[NodeSample, ...] = ()
    error: str = ""
    """Why there are no nodes, or what went wrong finding them (shown)."""

    @property
    def answered(self) -> int:
        """Nodes that answered anything (health, Stats or admin)."""
        return sum(n.state != "down" or n.admin is not None for n in self.nodes)
