"""The failover decision's input (pure): ``NodeStatus`` (what the control plane
knows of one node: its last good probe) and ``ShardView`` (one shard at a time
``now_ms``: its recorded metadata and every node's status). ``failover.decide``
takes a view; ``views`` builds them from admin answers.

Invariants, checked on construction (``ValueError`` naming the field): a node's
name is non-empty, its role a ``Role``, its epoch and positions integers >= 0,
``flushed <= log_end``; a view's epoch >= 1, ``lease_ms > 0``, ``min_insync >=
1``, each node named once, and the recorded master has a status. Both are
frozen and hashable (sets and tuples, whatever the caller passed), so the same
view always compares and hashes the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..role import DEFAULT_LEASE_MS, Role

__all__ = ["MASTER", "REPLICA", "NodeStatus", "ShardView"]

MASTER = Role.MASTER
REPLICA = Role.REPLICA


def _role(name: str, text: str) -> Role:
    """``text`` as a ``Role``, or ValueError naming the node."""
    try:
        return Role(text)
    except ValueError:
        raise ValueError(
            f"NodeStatus {name}: role must be one of {[str(r) for r in Role]}, not {text!r}"
        ) from None


@dataclass(frozen=True, kw_only=True)
class NodeStatus:
    """What the control plane knows of one node: its last good probe."""

    name: str
    """The node's name, unique in the shard (the supervisor's node name, the pod's)."""
    reachable: bool
    """It answered the last probe. When False, the fields below are those of its
    last good probe, and may be stale."""
    seen_ms: int
    """When the caller received the node's latest answer, on the same clock as
    ``ShardView.now_ms`` (``failover``'s notes, "Leases"). A node the caller has never
    reached: the time the caller started watching (no earlier renewal by anyone
    can be later)."""
    role: Role = REPLICA
    """The role the node says it has: ``"master"`` or ``"replica"``."""
    epoch: int = 0
    """The shard epoch the node is in (0: none yet, a fresh node)."""
    log_end: int = 0
    """CommitLog bytes written (for the caller's status; the decision ranks by
    ``flushed``)."""
    flushed: int = 0
    """CommitLog bytes fsynced (at most ``log_end``)."""
    fenced: bool = False
    """It has stopped acking and delivering for good: told to (``Fence``), or it
    stopped itself (e.g. its disk refuses writes); it stays so until a ``Promote``
    or ``Follow`` of a higher epoch. A master whose lease has lapsed is not fenced:
    it is stopped, and resumes on a renewal while it is still the recorded master."""
    insync: frozenset[str] = frozenset()
    """A master's in-sync set as it reports it (names); empty for a replica. Only
    for the control plane's sync-set compare-and-set: ``decide`` elects from the
    recorded set, never from this one."""
    high_water: int = 0
    """A master's high-water mark: the lowest ``flushed`` over the in-sync set;
    records up to it may be delivered. 0 for a replica (ignored there). A fenced
    old master's last one still counts: no later master may hold less."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"NodeStatus.name: must be a non-empty string, got {self.name!r}")
        if not isinstance(self.role, Role):
            object.__setattr__(self, "role", _role(self.name, self.role))
        for what in ("epoch", "log_end", "flushed", "high_water"):
            value = getattr(self, what)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"NodeStatus {self.name}: {what} must be an integer >= 0")
        if self.flushed > self.log_end:
            raise ValueError(
                f"NodeStatus {self.name}: flushed {self.flushed} beyond log_end {self.log_end}"
            )
        object.__setattr__(self, "insync", frozenset(self.insync))


@dataclass(frozen=True, kw_only=True)
class ShardView:
    """One shard as the control plane sees it at ``now_ms``."""

    epoch: int
    """The recorded shard epoch (>= 1), authoritative (the supervisor's state file,
    the DelayTopic's status)."""
    master: str
    """The recorded master's name; ``nodes`` must hold its status."""
    insync: frozenset[str]
    """The recorded in-sync set (names): the only nodes that may be elected."""
    nodes: tuple[NodeStatus, ...]
    """Every node of the shard, each once (any order)."""
    now_ms: int
    """The caller's clock now (the one ``seen_ms`` is read on)."""
    lease_ms: int = DEFAULT_LEASE_MS
    """How long after its last good probe an unreachable node has surely stopped
    acking and delivering (it self-fences within it)."""
    min_insync: int = 1
    """Nodes (the master included) that must have fsynced a write before it is
    acknowledged in sync mode; 1 for async."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "insync", frozenset(self.insync))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        if self.epoch < 1:
            raise ValueError(f"ShardView.epoch must be >= 1, got {self.epoch}")
        if self.lease_ms <= 0:
            raise ValueError(f"ShardView.lease_ms must be > 0, got {self.lease_ms}")
        if self.min_insync < 1:
            raise ValueError(f"ShardView.min_insync must be >= 1, got {self.min_insync}")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"ShardView.nodes: a name given twice in {sorted(names)}")
        if self.master not in names:
            raise ValueError(f"ShardView: no status for the recorded master {self.master!r}")

    def status(self, name: str) -> NodeStatus | None:
        """The status of node ``name`` (None when the view has none)."""
        for n in self.nodes:
            if n.name == name:
                return n
        return None
