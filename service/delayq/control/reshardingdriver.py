"""The one driver of a change of the shard count, a round at a time, over a
``reshardinghost.ReshardingHost`` (the local cluster's ``cluster scale``, the
operator's topic daemon): it reads the map, takes ``resharding.next_step``
towards the target, and makes the host do that step's side effects, in this
order:

=========  ================================================================
ADD        the host makes the new shards ready; the map lists them joining
           (written first: a node needs its shard listed), then they start
REBALANCE  once every listed shard has a master in office that the map names
           (``host.unready``) and every master serves the map (its ``Stats``:
           the job plans on the map it fetches from a node, and a node still
           on an older one would refuse the job's hold), and every listed
           shard holds the consumer groups' policies the others hold
           (``copy_policies``: a shard taking moved messages enforces them
           before it hands any out), the job starts; once it succeeded, the
           map switches (``resharding.switched``)
DRAIN      once every leaving shard's master holds nothing
           (``drain_report``; a paused group's messages too: the report names
           the paused groups holding the drain, to be resumed and consumed,
           and a warning is logged each time they change),
           the map drops them (``resharding.dropped``)
DONE       shards the map no longer lists but whose nodes run are stopped
           only once every kept node serves the map without them (or after
           ``served_timeout_s``): a client fetching its route from any node
           then never gets one naming a stopped shard
=========  ================================================================

Every write is the host's compare-and-set of a change applied to the map as it
is then, and only if its layout (shards and states) is still the one the step
was decided on: a failover published meanwhile (a new master, the topology
epoch raised) is kept, and the step goes on.

**Carrying on through failovers.** A failover during the job raises the map's
epoch under it; the job's hold (admin ``Prepare``) is then refused (``this node
serves shard map epoch 3, past the 2 the rebalance planned on``) and the job
fails. A failed job whose map has moved on since it started, the layout
unchanged (the step is still REBALANCE: only a step changes the layout), is
run again at once on the map as it is now, once its masters serve it: the
moves are idempotent (a released message is found forwarded and imported; an
import sent again answers with the copy made before), so the rerun moves what
is left. A job that failed on the map it started on is the host's to report
(and to retry later, or not).

Not thread-safe: one thread calls ``round``. No I/O here but through the host.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..shardmap import JOINING, ShardMap
from .policyspread import HeldPolicy, disagreeing, missing
from .resharding import Step, drained, dropped, joining, next_step, same_layout, switched
from .reshardinghost import JobRun, JobState, Milestone, ReshardingHost, Round
from .stats import ShardStats

__all__ = [
    "ReshardingDriver",
    "Round",
    "copy_policies",
    "drain_report",
    "paused_groups",
    "unserved",
]

log = logging.getLogger("delayq.control")


def _serves(got: ShardStats | None, current: ShardMap) -> bool:
    """A node's answer says it serves ``current`` (or a later map)."""
    return got is not None and got.topology_epoch >= current.topology_epoch


def unserved(current: ShardMap, answers: Mapping[int, ShardStats | None]) -> str:
    """Which shards' masters do not serve ``current`` (or a later map) yet."""
    why = []
    for e in current.shards:
        got = answers.get(e.index)
        if got is None:
            why.append(f"shard {e.index}'s master does not answer")
        elif not _serves(got, current):
            why.append(
                f"shard {e.index}'s master serves map epoch {got.topology_epoch}, "
                f"not {current.topology_epoch} yet"
            )
    return "; ".join(why)


def paused_groups(topics: Iterable[Mapping[str, Any]]) -> list[str]:
    """The paused groups with messages delivered and not acked (``topic/group``),
    from per-topic stats whose ``groups`` carry ``group`` and ``paused``: what
    holds a drain until they are resumed (a paused group is handed nothing)."""
    out = []
    for t in topics:
        backlog = t.get("group_backlog") or {}
        for g in t.get("groups") or ():
            if g.get("paused") and backlog.get(g.get("group")):
                out.append(f"{t.get('topic')}/{g.get('group')}")
    return sorted(out)


def drain_report(leaving: Mapping[int, ShardStats | None]) -> tuple[bool, str]:
    """Whether every leaving shard is drained (``resharding.drained``: nothing
    pending, every group has acked what it was delivered), and what is left (the
    paused groups among it named: they hold the drain until resumed)."""
    left = []
    for shard, got in sorted(leaving.items()):
        if got is None:
            left.append(f"shard {shard}'s master does not answer")
            continue
        if drained(got.topics):
            continue
        pending = sum(int(t.get("pending") or 0) for t in got.topics)
        unacked = sum(sum((t.get("group_backlog") or {}).values()) for t in got.topics)
        note = f"shard {shard}: {pending} pending, {unacked} delivered and not acked"
        paused = paused_groups(got.topics)
        if paused:
            note += f" (paused, holding the drain until resumed and consumed: {', '.join(paused)})"
        left.append(note)
    return not left, "; ".join(left)


def copy_policies(host: ReshardingHost, current: ShardMap) -> str:
    """Every listed shard made to hold the consumer groups' policies the shards not
    joining hold (``policyspread.missing``), through ``host``; "" once they all do,
    else what is in the way (a shard that does not answer, a refused set)."""
    held: dict[int, Sequence[HeldPolicy]] = {}
    for e in current.shards:
        got = host.group_policies(e.index)
        if got is None:
            return f"shard {e.index}'s master does not answer ListGroups"
        held[e.index] = got
    sources = [e.index for e in current.shards if e.state != JOINING]
    odd = disagreeing(held, sources)
    if odd:
        log.warning(
            "groups whose policies differ between shards (the lowest shard's is copied): %s",
            ", ".join(odd),
        )
    for shard, lacking in missing(held, sources, held).items():
        for h in lacking:
            why = host.set_group_policy(shard, h)
            if why:
                return f"shard {shard} refused group {h.topic}/{h.group}'s policy: {why}"
            log.info(
                "group %s/%s's policy copied to shard %d",
                h.topic,
                h.group,
                shard,
                extra={"topic": h.topic, "group": h.group, "shard": shard},
            )
    return ""


def _shards(indexes: list[int] | tuple[int, ...]) -> str:
    return ", ".join(map(str, indexes))


class ReshardingDriver:
    def __init__(
        self,
        host: ReshardingHost,
        *,
        served_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``served_timeout_s``: how long the kept nodes get to serve the map
        without the leaving shards before those stop anyway (a node that never
        answers must not hold the change for ever)."""
        self._host = host
        self._served_timeout_s = served_timeout_s
        self._clock = clock
        self._served_wait: tuple[int, float] | None = None  # (topology epoch, since)
        self._paused: list[str] = []  # the paused groups last seen holding a drain

    def round(self, target: int) -> Round | None:
        """One step towards ``target`` active shards; None when there is no map to
        read. Raises ``resharding.ChangeError`` for a target the map cannot take."""
        current = self._host.read_map()
        if current is None:
            return None
        step = next_step(current, target)
        if step is Step.ADD:
            done = self._add(current, target)
        elif step is Step.REBALANCE:
            done = self._rebalance(current, target)
        elif step is Step.DRAIN:
            done = self._drain(current)
        else:
            done = self._done(current)
        self._host.record(done)
        return done

    def _write(self, current: ShardMap, change: Callable[[ShardMap], ShardMap]) -> ShardMap | None:
        """``change`` written on the map as it is now, if its layout still is
        ``current``'s (a failover since is kept; another step is not undone)."""
        return self._host.write_map(lambda now: change(now) if same_layout(now, current) else None)

    # -- ADD
    def _add(self, current: ShardMap, target: int) -> Round:
        entries = self._host.add_shards(current, target)
        written = self._write(current, lambda now: joining(now, entries))
        if written is None:
            return Round(step=Step.ADD, note="the map changed meanwhile; again")
        self._host.start_shards(current.count)
        added = _shards([e.index for e in entries])
        note = (
            f"shard(s) {added} added, joining: they serve and take moved messages, and own "
            f"keys once the rebalance to {target} shards has switched the map"
        )
        self._host.reached(Milestone.ADDED, note)
        return Round(step=Step.ADD, note=f"shard(s) {added} joining", written=written)

    # -- REBALANCE
    def _rebalance(self, current: ShardMap, target: int) -> Round:
        run = self._host.job(current, target)
        if run.state is JobState.RUNNING:
            return Round(step=Step.REBALANCE, note=f"job {run.note} running")
        if run.state is JobState.SUCCEEDED:
            return self._switch(current, target, run)
        again = ""
        if run.state is JobState.FAILED:
            if 0 < run.planned_epoch < current.topology_epoch:
                again = (
                    f" (again: a failover moved the map from topology epoch "
                    f"{run.planned_epoch} to {current.topology_epoch} under the last job, "
                    f"which failed: {run.note})"
                )
            elif not run.retry_due:
                return Round(step=Step.REBALANCE, note=run.note, failed=run.note)
        why = (
            self._host.unready(current)
            or unserved(current, {e.index: self._host.shard_stats(e.index) for e in current.shards})
            or copy_policies(self._host, current)
        )
        if why:
            return Round(step=Step.REBALANCE, note=f"waiting: {why}", waiting=True)
        note = self._host.start_job(current, target) + again
        if again:
            log.warning("rebalance to %d shards: %s", target, note)
        return Round(step=Step.REBALANCE, note=note)

    def _switch(self, current: ShardMap, target: int, run: JobRun) -> Round:
        written = self._write(current, lambda now: switched(now, target))
        if written is None:
            return Round(step=Step.REBALANCE, note="the map changed meanwhile; again")
        note = (
            f"job {run.note} succeeded: the shard map switched to {target} active shards "
            f"(topology epoch {written.topology_epoch})"
        )
        self._host.reached(Milestone.SWITCHED, note)
        return Round(step=Step.REBALANCE, note="switched", written=written)

    # -- DRAIN
    def _drain(self, current: ShardMap) -> Round:
        leaving = [e.index for e in current.shards if not e.active]
        answers = {s: self._host.shard_stats(s) for s in leaving}
        ok, left = drain_report(answers)
        if not ok:
            self._warn_paused([p for a in answers.values() if a for p in paused_groups(a.topics)])
            return Round(step=Step.DRAIN, note=f"draining: {left}")
        written = self._write(current, dropped)
        if written is None:
            return Round(step=Step.DRAIN, note="the map changed meanwhile; again")
        gone = _shards(leaving)
        note = (
            f"shard(s) {gone} drained and dropped from the map (topology epoch "
            f"{written.topology_epoch}); their nodes stop once every kept node serves it"
        )
        self._host.reached(Milestone.DROPPED, note)
        return Round(step=Step.DRAIN, note=f"shard(s) {gone} dropped", written=written)

    def _warn_paused(self, paused: list[str]) -> None:
        """A warning each time the paused groups holding the drain change."""
        if paused and paused != self._paused:
            log.warning(
                "the drain waits for paused group(s) %s: a paused group is handed nothing; "
                "resume it (delayq group resume TOPIC GROUP) and let it consume",
                ", ".join(paused),
                extra={"paused": paused},
            )
        self._paused = paused

    # -- DONE
    def _done(self, current: ShardMap) -> Round:
        beyond = list(self._host.running_beyond(current.count))
        if not beyond:
            self._served_wait = None
            return Round(step=Step.DONE, note=f"{current.owners} shards active", done=True)
        gone = _shards(beyond)
        lagging = self._lagging(current)
        if lagging:
            epoch, now = current.topology_epoch, self._clock()
            if self._served_wait is None or self._served_wait[0] != epoch:
                self._served_wait = (epoch, now)
            if now - self._served_wait[1] < self._served_timeout_s:
                return Round(
                    step=Step.DONE,
                    note=f"stopping shard(s) {gone} once every kept node serves topology "
                    f"epoch {epoch}; not yet: {', '.join(lagging)}",
                )
            log.warning(
                "nodes not serving the new map before the shards stop: %s",
                ", ".join(lagging),
                extra={"topology_epoch": epoch},
            )
        self._served_wait = None
        self._host.stop_shards(current.count)
        self._host.reached(Milestone.STOPPED, f"shard(s) {gone} stopped")
        done = not self._host.running_beyond(current.count)
        return Round(step=Step.DONE, note=f"shard(s) {gone} removed", done=done)

    def _lagging(self, current: ShardMap) -> list[str]:
        """The kept nodes that do not serve ``current`` (or a later map) yet."""
        answers = self._host.node_stats([e.index for e in current.shards])
        return sorted(name for name, got in answers.items() if not _serves(got, current))
