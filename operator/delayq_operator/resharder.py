"""A DelayTopic's change of its shard count, driven a step a round (the topic's
daemon calls ``Resharder.round`` every second, in a thread).

The shard map in the topic's ConfigMap is the source of truth for the step
(``delayq.control.resharding.next_step`` towards ``spec.shards``, or towards the
change already under way: ``changes.target``), so an operator restarted
midway resumes where it was:

=========  ==============================================================
ADD        write the map with the new shards joining (they must be listed
           before their pods start: ``delayq serve`` refuses a map without
           its shard), then apply their StatefulSets, Services and budgets.
           Their keepers found their masters (``keepers``).
REBALANCE  once every listed shard's master is in office, named by the map
           and serving the map, run the Job ``delayq-spark rebalance``
           (``jobs.rebalance_job``); when it succeeds serve
           ``resharding.switched`` (joining shards active, or the shards
           from N on leaving). A failed Job (its ``backoffLimit`` spent)
           leaves the map as it was: reported (status, Warning event), and
           retried after a back-off, or at once when ``spec.spark`` or the
           image changed.
DRAIN      ask the leaving shards' masters (public ``Stats``) until
           ``resharding.drained``, then serve ``resharding.dropped`` and
           delete their StatefulSets (volume claims per ``pvcRetention``),
           Services and budgets.
DONE       tidy what a stopped operator may have left (a removed shard's
           objects or records; a Job of a change no longer wanted) and mark
           the change done.
=========  ==============================================================

A running Job of a change no longer wanted (``spec.shards`` set back, or
raised, before a scale-down switched) is deleted first, in every step: two
rebalances never move messages side by side.
Every write of the map is made under the topic's lock (the reconcile handler
and the keepers' ``publish`` write it too) and by compare-and-set on the
ConfigMap's resource version, on the map as it is then: the switch checks
that the map still is the one the Job moved messages for (a failover in
between changes a master, never the shards' states). Progress goes to
``status.rebalance`` and the ``Rebalanced`` condition through ``report``;
events: ShardsAdded, RebalanceStarted, RebalanceFailed, RebalanceSucceeded,
ShardsDrained, ReshardingDeferred.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import ApiException

from delayq.control.resharding import Step, dropped, joining, next_step, switched
from delayq.control.stats import ShardStats, shard_stats
from delayq.shardmap import ShardMap, ShardMapError, parse

from . import changes, jobs
from .changes import JobView, Progress
from .desired import shard_objects
from .kube import Cluster
from .records import records_of
from .shardmaps import next_epoch, shard_entry, shard_map
from .spec import DelayTopicSpec, SpecError, parse_spec
from .status import ShardView

__all__ = ["Report", "Resharder"]

log = logging.getLogger("delayq_operator.resharder")

Report = Callable[[Progress, "int | None"], None]
"""Writes a change's progress (and the topology epoch of a map just written)
into the topic's status."""


def _api_message(e: ApiException) -> str:
    """The API server's own message of a refusal (its Status body), else the body."""
    try:
        return str(json.loads(e.body or "{}").get("message") or e.body)
    except ValueError:
        return str(e.body)


def _stamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(stamp: str) -> float:
    if not stamp:
        return 0.0
    return (
        datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=datetime.UTC)
        .timestamp()
    )


class Resharder:
    """Not thread-safe: one thread (the topic's daemon) calls ``round``."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        name: str,
        *,
        default_image: str,
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
        self._default_image = default_image
        self._lock = lock  # the topic's: the map's other writers hold it too
        self._report = report
        self._prepare = prepare
        self._clock = clock

    # -- one round
    def round(self) -> None:
        read = self._read()
        if read is None:
            return
        topic, spec, current = read
        progress = Progress.of((topic.get("status") or {}).get("rebalance"))
        to, deferred = changes.target(current, spec.shards)
        step = next_step(current, to)
        if step is Step.DONE:
            self._done(topic, current, progress)
            return
        if progress is None or progress.shards_to != to or progress.step == changes.DONE:
            progress = Progress.begin(step, current, to)
            log.info("%s/%s: shards %d -> %d", self.namespace, self.name, current.owners, to)
        if deferred and deferred not in progress.message:  # said once, then kept in the status
            self._event(topic, "Normal", "ReshardingDeferred", deferred)
        # a Job of a change no longer wanted (a scale-down's, spec.shards raised before
        # it switched) must not move messages beside this change's
        self._stop_jobs(but=jobs.change_id(progress.epoch, to))
        progress = progress.but(step=step.value)
        written: int | None = None
        if step is Step.ADD:
            progress, written = self._add(topic, spec, current, progress)
        elif step is Step.REBALANCE:
            progress, written = self._rebalance(topic, spec, current, progress)
        else:
            progress, written = self._drain(topic, spec, current, progress)
        if deferred:
            progress = progress.but(message=f"{progress.message}; {deferred}".lstrip("; "))
        self._report(progress, written)

    def _read(self) -> tuple[dict[str, Any], DelayTopicSpec, ShardMap] | None:
        topic = self.cluster.get_topic(self.namespace, self.name)
        if topic is None or (topic["metadata"].get("deletionTimestamp")):
            return None
        try:
            spec = parse_spec(topic, self._default_image)
        except SpecError:
            return None  # the reconcile handler reports it
        held = self.cluster.shard_map(self.namespace, self.name)
        if held is None:
            return None  # not written yet: the reconcile handler writes the first
        try:
            return topic, spec, parse(held[0])
        except ShardMapError:
            return None  # the reconcile handler reports and rewrites it

    def _write(
        self, step: Step, to: int, same: ShardMap, change: Callable[[ShardMap], ShardMap]
    ) -> ShardMap | None:
        """Under the topic's lock: if the map is still at ``step`` towards ``to``
        with the shards of ``same`` in their states, write ``change(map)`` (by
        compare-and-set; never below the epoch the status recorded). The map
        written, or None when it had moved on."""
        with self._lock:
            topic = self.cluster.get_topic(self.namespace, self.name)
            held = self.cluster.shard_map(self.namespace, self.name)
            if topic is None or held is None:
                return None
            now = parse(held[0])
            if next_step(now, to) is not step or [e.state for e in now.shards] != [
                e.state for e in same.shards
            ]:
                return None
            new = change(now)
            floor = int((topic.get("status") or {}).get("topologyEpoch") or 0)
            if new.topology_epoch <= floor:
                new = ShardMap(
                    topology_epoch=next_epoch(now, floor), shards=new.shards, topic=new.topic
                )
            self.cluster.write_map(shard_map(topic, new), held[1])
            return new

    # -- ADD
    def _add(
        self, topic: dict[str, Any], spec: DelayTopicSpec, current: ShardMap, progress: Progress
    ) -> tuple[Progress, int | None]:
        first, to = current.count, progress.shards_to
        records = records_of(topic.get("status"))
        masters = {i: (r.master, r.epoch) for i, r in records.items()}
        new = [shard_entry(self.name, self.namespace, spec, i, masters) for i in range(first, to)]
        self._prepare(topic, spec, to)
        written = self._write(Step.ADD, to, current, lambda m: joining(m, new))
        if written is None:
            return progress, None
        for i in range(first, to):
            self.cluster.apply(shard_objects(topic, spec, i))
        added = ", ".join(str(i) for i in range(first, to))
        self._event(
            topic,
            "Normal",
            "ShardsAdded",
            f"shard(s) {added} added, joining: they serve and take moved messages, and own "
            f"keys once the rebalance to {to} shards has switched the map",
        )
        return progress.but(message=f"shard(s) {added} joining"), written.topology_epoch

    # -- REBALANCE
    def _views(self) -> dict[int, ShardView]:
        return {v.index: v for v in self.cluster.shard_views(self.namespace, self.name)}

    def _stats(
        self,
        spec: DelayTopicSpec,
        views: Mapping[int, ShardView],
        topic: dict[str, Any],
        shards: list[int],
    ) -> dict[int, ShardStats | None]:
        """Each shard's recorded master's ``Stats``, at its pod's IP (the operator
        may not resolve pod names)."""
        records = records_of(topic.get("status"))
        out: dict[int, ShardStats | None] = {}
        for shard in shards:
            view, rec = views.get(shard), records.get(shard)
            pods = view.pods if view is not None and rec is not None else ()
            ip = next((p.ip for p in pods if rec is not None and p.name == rec.master), None)
            out[shard] = shard_stats(f"{ip}:{spec.port}") if ip else None
        return out

    def _rebalance(
        self, topic: dict[str, Any], spec: DelayTopicSpec, current: ShardMap, progress: Progress
    ) -> tuple[Progress, int | None]:
        to = progress.shards_to
        labels = {
            "delayq.io/topic": self.name,
            jobs.LABEL_JOB: "rebalance",
            jobs.LABEL_CHANGE: jobs.change_id(progress.epoch, to),
        }
        found = {j["metadata"]["name"]: j for j in self.cluster.jobs(self.namespace, labels)}
        desired = jobs.rebalance_job(topic, spec, epoch=progress.epoch, target=to)
        seen = [self._job_view(j, desired) for j in found.values()]
        progress = progress.but(attempts=sum(j.attempts for j in seen))
        action = changes.next_action(seen, self._clock())
        if action.job is not None and action.job.state is jobs.JobState.FAILED:
            progress = self._failed(topic, progress, action, found[action.job.name])
        if action.kind == "create":
            why = self._unready(topic, spec, current)
            if why:  # (a retry waits too: a shard lost its master meanwhile, say)
                return progress.but(message=f"waiting: {why}"), None
            return self._start(topic, spec, progress, action, seen), None
        assert action.job is not None
        job = action.job
        if action.kind == "wait":
            return progress.but(job=job.name, failed=False, message=f"job {job.name} running"), None
        if action.kind == "switch":
            written = self._write(Step.REBALANCE, to, current, lambda m: switched(m, to))
            if written is None:
                return progress, None
            self._event(
                topic,
                "Normal",
                "RebalanceSucceeded",
                f"job {job.name} succeeded: the shard map switched to {to} active shards "
                f"(topology epoch {written.topology_epoch})",
            )
            done = progress.but(job=job.name, failed=False, message="switched")
            return done, written.topology_epoch
        # hold: the newest failed (reported above); the map stays as it is until a
        # retry succeeds
        return progress.but(message=f"job {job.name} failed; retrying at {progress.retry_at}"), None

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
        retry_at = _stamp(due)
        self._event(
            topic,
            "Warning",
            "RebalanceFailed",
            f"job {name} failed: {error}; the shard map stays as it was; retrying at "
            f"{retry_at}, or at once when spec.spark or the image changes",
        )
        return progress.but(job=name, failed=True, last_error=error, retry_at=retry_at)

    def _unready(self, topic: dict[str, Any], spec: DelayTopicSpec, current: ShardMap) -> str:
        """Why the Job cannot start on ``current`` yet (empty: it can). A listed
        shard whose objects are missing (an operator stopped midway) gets them."""
        views = self._views()
        for e in current.shards:
            if e.index not in views:
                self.cluster.apply(shard_objects(topic, spec, e.index))
        why = changes.unready(current, views, records_of(topic.get("status")))
        if why:
            return why
        listed = [e.index for e in current.shards]
        return changes.unserved(current, self._stats(spec, views, topic, listed))

    def _start(
        self,
        topic: dict[str, Any],
        spec: DelayTopicSpec,
        progress: Progress,
        action: changes.Action,
        seen: list[JobView],
    ) -> Progress:
        to = progress.shards_to
        job = jobs.rebalance_job(topic, spec, epoch=progress.epoch, target=to, retry=action.retry)
        name = job["metadata"]["name"]
        # recorded before the Job exists: an operator restarted in between finds the
        # change (and so the Job's name) in the status
        self._report(progress.but(job=name, message=f"starting job {name}"), None)
        for old in seen:  # keep the latest failed one (kubectl logs)
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
            return progress.but(job=name, failed=True, last_error=error, message=error)
        started = progress.but(job=name, failed=False, retry_at="", message=f"job {name} started")
        again = f" (retry {action.retry})" if action.retry else ""
        self._event(
            topic,
            "Normal",
            "RebalanceStarted",
            f"job {name}{again}: delayq-spark rebalance to {to} shards on {spec.spark.master}",
        )
        return started

    def _job_view(self, job: dict[str, Any], desired: dict[str, Any]) -> JobView:
        status = job.get("status") or {}
        state = jobs.job_state(status)
        when, _ = jobs.job_failure(status)
        retry = (job["metadata"].get("labels") or {}).get(jobs.LABEL_RETRY, "0")
        return JobView(
            name=job["metadata"]["name"],
            retry=int(retry) if retry.isdigit() else 0,
            state=state,
            attempts=jobs.attempts(status),
            failed_at=_seconds(when) if state is jobs.JobState.FAILED else 0.0,
            outdated=jobs.outdated(job, desired),
        )

    def _failure(self, name: str, job: dict[str, Any]) -> str:
        """Why Job ``name`` failed: its newest failed pod's last words, else the
        Job controller's reason."""
        for pod in reversed(self.cluster.job_pods(self.namespace, name)):
            why = jobs.pod_failure(pod.get("status") or {})
            if why:
                return why
        return jobs.job_failure(job.get("status"))[1] or "no reason given"

    # -- DRAIN
    def _drain(
        self, topic: dict[str, Any], spec: DelayTopicSpec, current: ShardMap, progress: Progress
    ) -> tuple[Progress, int | None]:
        leaving = [e.index for e in current.shards if not e.active]
        views = self._views()
        ok, left = changes.drain_report(self._stats(spec, views, topic, leaving))
        if not ok:
            return progress.but(message=f"draining: {left}"), None
        written = self._write(Step.DRAIN, progress.shards_to, current, dropped)
        if written is None:
            return progress, None
        for shard in leaving:
            self.cluster.delete_shard(self.namespace, self.name, shard)
        gone = ", ".join(str(i) for i in leaving)
        self._event(
            topic,
            "Normal",
            "ShardsDrained",
            f"shard(s) {gone} drained, dropped from the map (topology epoch "
            f"{written.topology_epoch}) and removed; volumes: {spec.pvc_retention}",
        )
        return progress.but(message=f"shard(s) {gone} removed"), written.topology_epoch

    # -- DONE
    def _done(self, topic: dict[str, Any], current: ShardMap, progress: Progress | None) -> None:
        """After a change: remove what a stopped operator left (a dropped shard's
        objects and record; the running Job of a change given up: spec.shards set
        back before it switched), then mark the change done."""
        if progress is None or progress.step == changes.DONE:
            return
        views = self._views()
        left = sorted(s for s in views if s >= current.count)
        for shard in left:
            self.cluster.delete_shard(self.namespace, self.name, shard)
        stale = [
            s for s in records_of(topic.get("status")) if s >= current.count and s not in views
        ]
        if stale:
            self.cluster.drop_records(self.namespace, self.name, stale)
        self._stop_jobs()
        if left:  # their records go once their StatefulSets have
            gone = ", ".join(map(str, left))
            self._report(progress.but(message=f"removing shard(s) {gone}"), None)
            return
        message = f"{current.owners} shards active"
        self._report(
            progress.but(step=changes.DONE, failed=False, retry_at="", message=message), None
        )

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
