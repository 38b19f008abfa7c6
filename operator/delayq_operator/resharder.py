"""A DelayTopic's change of its shard count: the operator as the host
(``delayq.control.reshardinghost.ReshardingHost``) of the one resharding driver
(``delayq.control.reshardingdriver``), which the topic's daemon runs a round a
second (``Resharder.round``, in a thread).

The shard map in the topic's ConfigMap is the source of truth for the step
(towards ``spec.shards``, or towards the change already under way:
``changes.target``), so an operator restarted midway resumes where it was. The
steps and their order are the driver's; here their side effects:

=========  ==============================================================
ADD        the new shards' entries (and their certificates' names:
           ``prepare``); once the driver has listed them joining, their
           StatefulSets, Services and budgets. Their keepers found their
           masters (``keepers``).
REBALANCE  the consumer groups' policies copied to every shard lacking one
           (``delayq.control.policycopy``, at each master's pod IP); the Job
           ``delayq-spark rebalance`` (``jobs.rebalance_job``),
           annotated with the topology epoch it was made on; its state read
           back through ``changes.next_action``. A failed Job (its
           ``backoffLimit`` spent) is reported (status, Warning event) and
           retried after a back-off, or at once when ``spec.spark`` or the
           image changed, or (the driver's rule) when a failover moved the map
           on under it.
DRAIN      each leaving shard's recorded master's public ``Stats``, at its
           pod's IP.
DONE       a dropped shard's StatefulSet (volume claims per
           ``pvcRetention``), Services and budget deleted once every kept pod
           serves the map without it (``node_stats``); then what a stopped
           operator may have left (a removed shard's records; a Job of a change
           no longer wanted) is tidied, and the change marked done.
=========  ==============================================================

A running Job of a change no longer wanted (``spec.shards`` set back, or
raised, before a scale-down switched) is deleted first, in every step: two
rebalances never move messages side by side.
Every write of the map is made under the topic's lock (the reconcile handler
and the keepers' ``publish`` write it too) and by compare-and-set on the
ConfigMap's resource version, on the map as it is then (``write_map``; a
failover in between changes a master, never the shards' states). Progress goes
to ``status.rebalance`` and the ``Rebalanced`` condition through ``report``;
events: ShardsAdded, RebalanceStarted, RebalanceFailed, RebalanceSucceeded,
ShardsDrained, ReshardingDeferred.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from delayq.control.policycopy import held_policies, set_policy
from delayq.control.policyspread import HeldPolicy
from delayq.control.resharding import Step, next_step
from delayq.control.reshardingdriver import ReshardingDriver
from delayq.control.reshardinghost import JobRun, JobState, Milestone, Round
from delayq.control.stats import ShardStats, shard_stats
from delayq.shardmap import ShardEntry, ShardMap, ShardMapError, parse

from . import changes, jobs
from .changes import JobView, Progress
from .desired import shard_objects
from .kube import ApiException, Cluster
from .records import records_of
from .shardmaps import next_epoch, shard_entry, shard_map
from .spec import DelayTopicSpec, SpecError, TopicDefaults, parse_spec
from .status import ShardView

__all__ = ["Report", "Resharder"]

log = logging.getLogger("delayq_operator.resharder")

SERVED_TIMEOUT_S = 120.0
"""How long a dropped shard's pods keep running for the kept pods to serve the map
without it (the kubelet updates a mounted ConfigMap a while after it changed;
a pod that never answers must not hold the change for ever)."""

Report = Callable[[Progress, "int | None"], None]
"""Writes a change's progress (and the topology epoch of a map just written)
into the topic's status."""


def _api_message(e: ApiException) -> str:
    """The API server's own message of a refusal (its Status body), else the body."""
    try:
        return str(json.loads(e.body or "{}").get("message") or e.body)
    except ValueError:
        return str(e.body)


class Resharder:
    """Not thread-safe: one thread (the topic's daemon) calls ``round``. The
    driver's host: its methods act on the topic as this round read it."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        name: str,
        *,
        defaults: TopicDefaults,
        lock: threading.RLock,
        report: Report,
        prepare: Callable[[dict[str, Any], DelayTopicSpec, int], None] = lambda *_: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``prepare(topic, spec, shards)``: make ready what ``shards`` shards' pods
        need before they are created (their certificate names them)."""
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self._defaults = defaults
        self._lock = lock  # the topic's: the map's other writers hold it too
        self._report = report
        self._prepare = prepare
        self._clock = clock
        self._driver = ReshardingDriver(self, served_timeout_s=SERVED_TIMEOUT_S)
        # this round's: the topic, its spec and map as read, the change's progress
        self._topic: dict[str, Any] = {}
        self._spec: DelayTopicSpec | None = None
        self._current: ShardMap | None = None
        self._progress: Progress | None = None
        self._written: int | None = None
        self._views_now: dict[int, ShardView] | None = None
        self._action: changes.Action | None = None
        self._seen: list[JobView] = []

    # -- one round
    def round(self) -> None:
        read = self._read()
        if read is None:
            return
        topic, spec, current = read
        progress = Progress.of((topic.get("status") or {}).get("rebalance"))
        to, deferred = changes.target(current, spec.shards)
        step = next_step(current, to)
        if step is Step.DONE and (progress is None or progress.step == changes.DONE):
            return
        if progress is None or progress.shards_to != to or progress.step == changes.DONE:
            progress = Progress.begin(step, current, to)
            log.info("%s/%s: shards %d -> %d", self.namespace, self.name, current.owners, to)
        if deferred and deferred not in progress.message:  # said once, then kept in the status
            self._event(topic, "Normal", "ReshardingDeferred", deferred)
        # a Job of a change no longer wanted (a scale-down's, spec.shards raised before
        # it switched) must not move messages beside this change's
        self._stop_jobs(but=jobs.change_id(progress.epoch, to))
        self._topic, self._spec, self._current = topic, spec, current
        self._progress, self._written, self._views_now = progress.but(step=step.value), None, None
        done = self._driver.round(to)
        progress = self._progress
        if done is not None and done.done:
            self._done(current, progress)
            return
        if deferred:
            progress = progress.but(message=f"{progress.message}; {deferred}".lstrip("; "))
        self._report(progress, self._written)

    def _read(self) -> tuple[dict[str, Any], DelayTopicSpec, ShardMap] | None:
        topic = self.cluster.get_topic(self.namespace, self.name)
        if topic is None or (topic["metadata"].get("deletionTimestamp")):
            return None
        try:
            spec = parse_spec(topic, self._defaults)
        except SpecError:
            return None  # the reconcile handler reports it
        held = self.cluster.shard_map(self.namespace, self.name)
        if held is None:
            return None  # not written yet: the reconcile handler writes the first
        try:
            return topic, spec, parse(held[0])
        except ShardMapError:
            return None  # the reconcile handler reports and rewrites it

    @property
    def _at(self) -> tuple[dict[str, Any], DelayTopicSpec, Progress]:
        assert self._spec is not None and self._progress is not None
        return self._topic, self._spec, self._progress

    # -- the driver's host: the map
    def read_map(self) -> ShardMap | None:
        return self._current

    def write_map(self, change: Callable[[ShardMap], ShardMap | None]) -> ShardMap | None:
        """Under the topic's lock: ``change`` of the map as it is now, written by
        compare-and-set on its resource version (never below the epoch the
        status recorded)."""
        with self._lock:
            topic = self.cluster.get_topic(self.namespace, self.name)
            held = self.cluster.shard_map(self.namespace, self.name)
            if topic is None or held is None:
                return None
            now = parse(held[0])
            new = change(now)
            if new is None:
                return None
            floor = int((topic.get("status") or {}).get("topologyEpoch") or 0)
            if new.topology_epoch <= floor:
                new = ShardMap(
                    topology_epoch=next_epoch(now, floor), shards=new.shards, topic=new.topic
                )
            self.cluster.write_map(shard_map(topic, new), held[1])
            return new

    def record(self, done: Round) -> None:
        _, _, progress = self._at
        self._progress = progress.but(step=done.shown, message=done.note)
        if done.written is not None:
            self._written = done.written.topology_epoch

    def reached(self, milestone: Milestone, note: str) -> None:
        topic, spec, progress = self._at
        if milestone is Milestone.ADDED:
            self._event(topic, "Normal", "ShardsAdded", note)
        elif milestone is Milestone.SWITCHED:
            self._progress = progress.but(failed=False)
            self._event(topic, "Normal", "RebalanceSucceeded", note)
        elif milestone is Milestone.DROPPED:
            self._event(topic, "Normal", "ShardsDrained", f"{note}; volumes: {spec.pvc_retention}")
        else:
            log.info("%s/%s: %s", self.namespace, self.name, note)

    # -- the driver's host: shards
    def add_shards(self, current: ShardMap, target: int) -> Sequence[ShardEntry]:
        topic, spec, _ = self._at
        records = records_of(topic.get("status"))
        masters = {i: (r.master, r.epoch) for i, r in records.items()}
        new = [
            shard_entry(self.name, self.namespace, spec, i, masters)
            for i in range(current.count, target)
        ]
        self._prepare(topic, spec, target)
        return new

    def start_shards(self, first: int) -> None:
        topic, spec, progress = self._at
        for i in range(first, progress.shards_to):
            self.cluster.apply(shard_objects(topic, spec, i))

    def _views(self) -> dict[int, ShardView]:
        if self._views_now is None:
            self._views_now = {
                v.index: v for v in self.cluster.shard_views(self.namespace, self.name)
            }
        return self._views_now

    def unready(self, current: ShardMap) -> str:
        """Why the Job cannot start on ``current`` yet (empty: it can). A listed
        shard whose objects are missing (an operator stopped midway) gets them."""
        topic, spec, _ = self._at
        views = self._views()
        for e in current.shards:
            if e.index not in views:
                self.cluster.apply(shard_objects(topic, spec, e.index))
        return changes.unready(current, views, records_of(topic.get("status")))

    def running_beyond(self, count: int) -> Sequence[int]:
        self._views_now = None  # (read afresh: a deletion may have gone through)
        return sorted(s for s in self._views() if s >= count)

    def stop_shards(self, keep: int) -> None:
        for shard in self.running_beyond(keep):
            self.cluster.delete_shard(self.namespace, self.name, shard)

    def _master(self, shard: int) -> str | None:
        """The shard's recorded master's public address at its pod's IP (the
        operator may not resolve pod names); None: no such pod with an IP."""
        topic, spec, _ = self._at
        view, rec = self._views().get(shard), records_of(topic.get("status")).get(shard)
        pods = view.pods if view is not None and rec is not None else ()
        ip = next((p.ip for p in pods if rec is not None and p.name == rec.master), None)
        return f"{ip}:{spec.port}" if ip else None

    def shard_stats(self, shard: int) -> ShardStats | None:
        """The shard's recorded master's ``Stats``."""
        address = self._master(shard)
        return shard_stats(address) if address else None

    def group_policies(self, shard: int) -> Sequence[HeldPolicy] | None:
        address = self._master(shard)
        return held_policies(address) if address else None

    def set_group_policy(self, shard: int, held: HeldPolicy) -> str:
        address = self._master(shard)
        return set_policy(address, held) if address else f"shard {shard} has no master pod"

    def node_stats(self, shards: Sequence[int]) -> Mapping[str, ShardStats | None]:
        _, spec, _ = self._at
        views = self._views()
        pods = [p for s in shards if (v := views.get(s)) is not None for p in v.pods]
        return {p.name: shard_stats(f"{p.ip}:{spec.port}") if p.ip else None for p in pods}

    # -- the driver's host: the Job
    def job(self, current: ShardMap, target: int) -> JobRun:
        topic, spec, progress = self._at
        labels = {
            "delayq.io/topic": self.name,
            jobs.LABEL_JOB: "rebalance",
            jobs.LABEL_CHANGE: jobs.change_id(progress.epoch, target),
        }
        found = {j["metadata"]["name"]: j for j in self.cluster.jobs(self.namespace, labels)}
        desired = jobs.rebalance_job(topic, spec, epoch=progress.epoch, target=target)
        seen = [changes.job_view(j, desired) for j in found.values()]
        progress = progress.but(attempts=sum(j.attempts for j in seen))
        action = changes.next_action(seen, self._clock())
        self._action, self._seen = action, seen
        if action.job is not None and action.job.state is jobs.JobState.FAILED:
            progress = self._failed(topic, progress, action, found[action.job.name])
        self._progress = progress
        if action.job is None:
            return JobRun(state=JobState.NONE)
        name, planned_epoch = action.job.name, action.job.planned_epoch
        if action.kind == "wait":
            self._progress = progress.but(job=name, failed=False)
            return JobRun(state=JobState.RUNNING, note=name, planned_epoch=planned_epoch)
        if action.kind == "switch":
            self._progress = progress.but(job=name)
            return JobRun(state=JobState.SUCCEEDED, note=name, planned_epoch=planned_epoch)
        # the newest failed (reported above): a retry is due ("create"), or the map
        # stays as it is until one is ("hold")
        return JobRun(
            state=JobState.FAILED,
            planned_epoch=planned_epoch,
            retry_due=action.kind == "create",
            note=f"job {name} failed; retrying at {self._progress.retry_at}"
            if action.kind == "hold"
            else name,
        )

    def _failed(
        self, topic: dict[str, Any], progress: Progress, action: changes.Action, job: dict[str, Any]
    ) -> Progress:
        """The change's newest Job failed: say why, once (status and a Warning
        event), whether its retry is due yet or not."""
        assert action.job is not None
        name = action.job.name
        if progress.failed and progress.job == name:
            return progress  # reported
        error = self._failure(name, job)
        due = action.retry_at or self._clock()
        retry_at = changes.stamp(due)
        self._event(
            topic,
            "Warning",
            "RebalanceFailed",
            f"job {name} failed: {error}; the shard map stays as it was; retrying at "
            f"{retry_at}, or at once when spec.spark or the image changes",
        )
        return progress.but(job=name, failed=True, last_error=error, retry_at=retry_at)

    def start_job(self, current: ShardMap, target: int) -> str:
        topic, spec, progress = self._at
        action = self._action or changes.Action(kind="create")
        # a retry's number: the next after the newest (also when the driver reruns a
        # Job that a failover failed before its back-off was spent)
        retry = action.retry + 1 if action.kind == "hold" else action.retry
        job = jobs.rebalance_job(topic, spec, epoch=progress.epoch, target=target, retry=retry)
        job["metadata"]["annotations"][changes.PLANNED_EPOCH] = str(current.topology_epoch)
        name = job["metadata"]["name"]
        # recorded before the Job exists: an operator restarted in between finds the
        # change (and so the Job's name) in the status
        self._report(progress.but(job=name, message=f"starting job {name}"), None)
        for old in self._seen:  # keep the latest failed one (kubectl logs)
            if action.job is None or old.name != action.job.name:
                self.cluster.delete_job(self.namespace, old.name)
        try:
            self.cluster.apply([job])
        except ApiException as e:
            if e.status not in (400, 403, 422):
                raise
            error = f"the Job was refused: {e.status} {e.reason}: {_api_message(e)}"
            if progress.last_error != error:  # said once; tried again every round
                self._event(topic, "Warning", "RebalanceFailed", f"job {name}: {error}")
            self._progress = progress.but(job=name, failed=True, last_error=error)
            return error
        self._progress = progress.but(job=name, failed=False, retry_at="")
        again = f" (retry {retry})" if retry else ""
        self._event(
            topic,
            "Normal",
            "RebalanceStarted",
            f"job {name}{again}: delayq-spark rebalance to {target} shards on {spec.spark.master}",
        )
        return f"job {name} started"

    def _failure(self, name: str, job: dict[str, Any]) -> str:
        """Why Job ``name`` failed: its newest failed pod's last words, else the
        Job controller's reason."""
        for pod in reversed(self.cluster.job_pods(self.namespace, name)):
            why = jobs.pod_failure(pod.get("status") or {})
            if why:
                return why
        return jobs.job_failure(job.get("status"))[1] or "no reason given"

    # -- DONE
    def _done(self, current: ShardMap, progress: Progress) -> None:
        """After a change (every dropped shard's objects deleted): drop what a
        stopped operator left (a removed shard's records; the running Job of a
        change given up: spec.shards set back before it switched), then mark the
        change done."""
        topic, views = self._topic, self._views()
        stale = [
            s for s in records_of(topic.get("status")) if s >= current.count and s not in views
        ]
        if stale:
            self.cluster.drop_records(self.namespace, self.name, stale)
        self._stop_jobs()
        message = f"{current.owners} shards active"
        done = progress.but(step=changes.DONE, failed=False, retry_at="", message=message)
        self._report(done, self._written)

    def _stop_jobs(self, but: str = "") -> None:
        """Delete the running rebalance Jobs of every change but ``but`` (its pod
        goes; a hold it took lapses)."""
        labels = {"delayq.io/topic": self.name, jobs.LABEL_JOB: "rebalance"}
        for job in self.cluster.jobs(self.namespace, labels):
            meta = job["metadata"]
            if (meta.get("labels") or {}).get(jobs.LABEL_CHANGE) == but:
                continue
            if jobs.job_state(job.get("status")) is jobs.JobState.RUNNING:
                log.info(
                    "%s/%s: stopping %s: its change is given up",
                    self.namespace,
                    self.name,
                    meta["name"],
                )
                self.cluster.delete_job(self.namespace, meta["name"])

    def _event(self, topic: dict[str, Any], kind: str, reason: str, message: str) -> None:
        log.info("%s/%s: %s: %s", self.namespace, self.name, reason, message)
        try:
            self.cluster.post_event(topic, kind, reason, message)
        except Exception as exc:  # an event is worth a log line, never a stalled change
            log.warning("cannot post event %s: %s", reason, exc)
