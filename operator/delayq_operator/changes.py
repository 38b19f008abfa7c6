"""A DelayTopic's change of its shard count: the resharding driver's decisions
(pure: maps, views and Job states in; what to do next out).

The resharding driver (``delayq.control.reshardingdriver``, with ``resharder``
as its host) walks ``delayq.control.resharding``'s steps towards ``spec.shards``
from the shard map alone; this module decides the operator's part of a round:

- ``target``: ``spec.shards``, unless a change towards another count is under
  way: that one is finished first (a joining shard may already hold moved
  messages, so a scale-up cannot be called off; the new count follows);
- ``unready``: why the rebalance Job cannot start yet (a listed shard without a
  master in office, or a map that does not name it yet; whether the masters
  serve the map is the driver's: ``delayq.control.reshardingdriver.unserved``);
- ``job_view``: a Job as the driver reads it (its state, retry, the map epoch it
  was made on: ``PLANNED_EPOCH``);
- ``next_action``: from the change's Jobs (``JobView``): create the first,
  wait for a running one, switch the map after one that succeeded, or after a
  failed one wait out the back-off (``jobs.retry_delay``) and create a retry
  (at once when the spec it was made from changed);
- ``Progress``: the change as ``status.rebalance`` shows it, its phase and its
  ``Rebalanced`` condition.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from delayq.control.record import ShardRecord
from delayq.control.resharding import ChangeError, Step, next_step, under_way
from delayq.shardmap import ShardMap

from .jobs import (
    LABEL_RETRY,
    JobState,
    attempts,
    job_failure,
    job_state,
    outdated,
    retry_delay,
)
from .status import ShardView

__all__ = [
    "PLANNED_EPOCH",
    "Action",
    "JobView",
    "Progress",
    "job_view",
    "next_action",
    "seconds",
    "stamp",
    "target",
    "unready",
]

ADD, REBALANCE, DRAIN, DONE = (s.value for s in (Step.ADD, Step.REBALANCE, Step.DRAIN, Step.DONE))


def target(current: ShardMap, wanted: int) -> tuple[int, str]:
    """The active shard count to drive towards, and why it is not ``wanted``
    (empty when it is)."""
    try:
        next_step(current, wanted)
    except ChangeError as exc:
        own = under_way(current)
        if own is None:
            raise
        return own, f"spec.shards={wanted} waits: {exc}; finishing the change to {own} first"
    return wanted, ""


def unready(
    current: ShardMap, views: Mapping[int, ShardView], records: Mapping[int, ShardRecord]
) -> str:
    """Why the rebalance cannot run on ``current`` yet (empty: it can): every
    shard listed must have its master (as ``records`` say: the views need not
    carry them) in office and ready, and the map must name that master at its
    epoch (the job reaches shards through the map)."""
    why = []
    for e in current.shards:
        view, rec = views.get(e.index), records.get(e.index)
        if view is None:
            why.append(f"shard {e.index} has no StatefulSet yet")
        elif rec is None or not dataclasses.replace(view, record=rec).serving():
            why.append(f"shard {e.index} has no master in office yet")
        elif e.epoch != rec.epoch or not e.master.startswith(f"{rec.master}."):
            why.append(f"the map does not name shard {e.index}'s master {rec.master} yet")
    return "; ".join(why)


@dataclass(frozen=True, kw_only=True)
class JobView:
    """One rebalance Job of the change, as the driver read it."""

    name: str
    retry: int
    state: JobState
    attempts: int = 0
    failed_at: float = 0.0
    """When it failed (seconds since the epoch); 0 unless failed."""
    outdated: bool = False
    """Made from another spec than the one that holds now (``jobs.outdated``)."""
    planned_epoch: int = 0
    """The topology epoch of the map it was made on (``PLANNED_EPOCH``; 0: unknown)."""


PLANNED_EPOCH = "delayq.io/topology-epoch"
"""A rebalance Job's annotation: the topology epoch of the map it was made on
(a Job that failed after a failover moved the map on is run again at once)."""


def job_view(job: Mapping[str, Any], desired: Mapping[str, Any]) -> JobView:
    """A rebalance Job as the driver reads it (``desired``: the Job the spec
    makes now, to tell an outdated one)."""
    meta = job["metadata"]
    status = job.get("status") or {}
    state = job_state(status)
    when, _ = job_failure(status)
    retry = (meta.get("labels") or {}).get(LABEL_RETRY, "0")
    planned = str((meta.get("annotations") or {}).get(PLANNED_EPOCH) or "0")
    return JobView(
        name=meta["name"],
        retry=int(retry) if retry.isdigit() else 0,
        state=state,
        attempts=attempts(status),
        failed_at=seconds(when) if state is JobState.FAILED else 0.0,
        outdated=outdated(job, desired),
        planned_epoch=int(planned) if planned.isdigit() else 0,
    )


def stamp(seconds: float) -> str:
    """``seconds`` since the epoch as the status writes times (UTC, to the second)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds(stamp: str) -> float:
    """The reverse of ``stamp`` (0 for an empty one)."""
    if not stamp:
        return 0.0
    return (
        datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=datetime.UTC)
        .timestamp()
    )


@dataclass(frozen=True, kw_only=True)
class Action:
    """``create`` (Job number ``retry``), ``wait`` (one runs), ``switch`` (the
    newest succeeded), or ``hold`` (the newest failed: retry at ``retry_at``)."""

    kind: str
    retry: int = 0
    job: JobView | None = None
    retry_at: float = 0.0


def next_action(jobs: Sequence[JobView], now: float) -> Action:
    """What to do about the change's Jobs: only the newest (highest retry)
    counts; an older one is history."""
    if not jobs:
        return Action(kind="create")
    newest = max(jobs, key=lambda j: j.retry)
    if newest.state is JobState.RUNNING:
        return Action(kind="wait", retry=newest.retry, job=newest)
    if newest.state is JobState.SUCCEEDED:
        return Action(kind="switch", retry=newest.retry, job=newest)
    due = newest.failed_at + retry_delay(newest.retry)
    if newest.outdated or now >= due:
        return Action(kind="create", retry=newest.retry + 1, job=newest)
    return Action(kind="hold", retry=newest.retry, job=newest, retry_at=due)


@dataclass(frozen=True, kw_only=True)
class Progress:
    """A change of the shard count as ``status.rebalance`` holds it."""

    step: str
    """``add``, ``rebalance``, ``drain`` or ``done``."""
    shards_from: int
    shards_to: int
    epoch: int
    """The topology epoch the change began at (its Jobs are named by it)."""
    job: str = ""
    """The latest rebalance Job."""
    attempts: int = 0
    """Pods the change's Jobs ran, over every retry."""
    failed: bool = False
    """The latest Job failed; the map stays as it was until a retry succeeds."""
    last_error: str = ""
    retry_at: str = ""
    message: str = ""

    @classmethod
    def begin(cls, step: Step, current: ShardMap, to: int) -> Progress:
        return cls(
            step=step.value, shards_from=current.owners, shards_to=to, epoch=current.topology_epoch
        )

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> Progress | None:
        """From the status (None: none, or unreadable: a change starts afresh)."""
        if not doc:
            return None
        try:
            return cls(
                step=str(doc["step"]),
                shards_from=int(doc["from"]),
                shards_to=int(doc["to"]),
                epoch=int(doc["epoch"]),
                job=str(doc.get("job") or ""),
                attempts=int(doc.get("attempts") or 0),
                failed=bool(doc.get("failed")),
                last_error=str(doc.get("lastError") or ""),
                retry_at=str(doc.get("retryAt") or ""),
                message=str(doc.get("message") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def doc(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "from": self.shards_from,
            "to": self.shards_to,
            "epoch": self.epoch,
            "job": self.job,
            "attempts": self.attempts,
            "failed": self.failed,
            "lastError": self.last_error,
            "retryAt": self.retry_at,
            "message": self.message,
        }

    def but(self, **changes: Any) -> Progress:
        return dataclasses.replace(self, **changes)

    @property
    def phase(self) -> str | None:
        """The topic's phase while the change runs (None once done)."""
        if self.step in (ADD, REBALANCE):
            return "RebalanceFailed" if self.failed else "Rebalancing"
        if self.step == DRAIN:
            return "Draining"
        return None

    def condition(self) -> dict[str, Any]:
        """The ``Rebalanced`` condition (type, status, reason, message)."""
        if self.step == DONE:
            reason, ok = "Done", True
        elif self.failed:
            reason, ok = "JobFailed", False
        else:
            reason = {ADD: "AddingShards", REBALANCE: "Rebalancing", DRAIN: "Draining"}.get(
                self.step, "Rebalancing"
            )
            ok = False
        head = f"{self.shards_from} -> {self.shards_to} shards: {self.step}"
        text = self.last_error if self.failed else self.message
        return {
            "type": "Rebalanced",
            "status": "True" if ok else "False",
            "reason": reason,
            "message": f"{head}; {text}" if text else head,
        }
