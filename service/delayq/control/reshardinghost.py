"""What the resharding driver (``reshardingdriver``) needs of whoever runs the
shards: the host protocol, implemented by the local cluster's supervisor
(``delayq.cluster.scaling``) and by the operator (``delayq_operator.resharder``).

The host owns every side effect: where the shard map is kept (``shards.json``;
the topic's ConfigMap) and how it is written (by compare-and-set on the map as
it is at the time of writing, so a failover published meanwhile is kept), how
shards' nodes start and stop (processes; StatefulSets), how the rebalance job
runs (``delayq-spark rebalance`` as a subprocess; a Kubernetes Job, with its
retries), how a node is asked what it serves (public ``Stats``) and which
groups' policies it holds, or told one (public ``ListGroups``,
``SetGroupPolicy``: ``policycopy``), and where progress goes (``scale.json``;
the topic's status and events). The driver decides, from the map and what
the host reports, what to do next.

Values here are plain and immutable; nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..shardmap import ShardEntry, ShardMap
from .policyspread import HeldPolicy
from .resharding import Step
from .stats import ShardStats

__all__ = ["JobRun", "JobState", "Milestone", "ReshardingHost", "Round"]


class JobState(enum.Enum):
    NONE = "none"
    """No job of this change (never started, or forgotten by a restart)."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    """Its moves are done (it printed its summary): the map may switch."""
    FAILED = "failed"


@dataclass(frozen=True, kw_only=True)
class JobRun:
    """The change's latest rebalance job, as the host sees it."""

    state: JobState
    planned_epoch: int = 0
    """The topology epoch of the map it was started on (0: unknown). A failed job
    whose map has moved on since, its layout unchanged, is run again at once: a
    failover raised the epoch under it (``reshardingdriver``)."""
    retry_due: bool = False
    """FAILED: the host's own retry is due (its back-off spent, or what the job
    runs changed); False: the failure stands (the host reported it)."""
    note: str = ""
    """For people: the job's name, or why it failed."""


@dataclass(frozen=True, kw_only=True)
class Round:
    """What one round did."""

    step: Step
    note: str = ""
    """What it waits for, or did (for people)."""
    written: ShardMap | None = None
    """The map it wrote, if it wrote one."""
    waiting: bool = False
    """It waits for the shards to be ready for the job (a host may give up)."""
    failed: str = ""
    """The job failed and its failure stands (the host reported it)."""
    done: bool = False
    """The change is complete: the map and the running shards agree on the target
    (a DONE step that is not: the dropped shards' nodes still run)."""

    @property
    def shown(self) -> str:
        """The step for people: DONE only once done (stopping a dropped shard's
        nodes is still the drain's)."""
        return Step.DRAIN.value if self.step is Step.DONE and not self.done else self.step.value


class Milestone(enum.Enum):
    """What the driver tells the host it did (the host logs, or posts events)."""

    ADDED = "added"
    """New shards listed as joining and started."""
    SWITCHED = "switched"
    """The job succeeded and the map switched."""
    DROPPED = "dropped"
    """The drained leaving shards left the map."""
    STOPPED = "stopped"
    """Their nodes stopped, once the kept nodes served the map without them."""


class ReshardingHost(Protocol):
    """The side effects of a change of the shard count. Called from one thread
    (the driver's); each call returns promptly (a round never blocks on a job)."""

    def read_map(self) -> ShardMap | None:
        """The map as it is now (None: none readable yet; the round does nothing)."""
        ...

    def write_map(self, change: Callable[[ShardMap], ShardMap | None]) -> ShardMap | None:
        """Compare-and-set: read the map as it is now, write ``change(now)`` unless
        it is None, with nothing written between the read and the write. The map
        written, or None (``change`` said no, or another writer came first)."""
        ...

    def add_shards(self, current: ShardMap, target: int) -> Sequence[ShardEntry]:
        """Make ready shards ``current.count``..``target - 1`` (not started: a node
        needs its shard listed first); their map entries."""
        ...

    def start_shards(self, first: int) -> None:
        """Start the nodes of the shards from ``first`` on (listed by now)."""
        ...

    def unready(self, current: ShardMap) -> str:
        """Why the job cannot run on ``current`` yet (empty: it can): a listed
        shard without a master in office, or one the map does not name yet."""
        ...

    def running_beyond(self, count: int) -> Sequence[int]:
        """Shards from ``count`` on whose nodes still run (left by a scale-down)."""
        ...

    def stop_shards(self, keep: int) -> None:
        """Stop the nodes of the shards from ``keep`` on and set them aside."""
        ...

    def job(self, current: ShardMap, target: int) -> JobRun:
        """This change's latest rebalance job (to ``target`` active shards)."""
        ...

    def start_job(self, current: ShardMap, target: int) -> str:
        """Start a rebalance job to ``target`` on ``current`` (a new one, or the next
        retry); what to say about it."""
        ...

    def shard_stats(self, shard: int) -> ShardStats | None:
        """Shard ``shard``'s master's ``Stats`` (None: no answer)."""
        ...

    def group_policies(self, shard: int) -> Sequence[HeldPolicy] | None:
        """The groups' policies set on shard ``shard``'s master
        (``policycopy.held_policies``; None: no answer)."""
        ...

    def set_group_policy(self, shard: int, held: HeldPolicy) -> str:
        """``held`` set on shard ``shard``'s master (``policycopy.set_policy``):
        "" when done, else why not."""
        ...

    def node_stats(self, shards: Sequence[int]) -> Mapping[str, ShardStats | None]:
        """Every node of these shards (masters and replicas), by a name for
        people: its ``Stats`` (None: no answer)."""
        ...

    def record(self, done: Round) -> None:
        """Progress: what the round did (its step, what it waits for or did, the
        map it wrote)."""
        ...

    def reached(self, milestone: Milestone, note: str) -> None:
        """The driver did ``milestone`` (``note`` says what, for people)."""
        ...
