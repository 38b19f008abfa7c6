"""The Spark jobs a DelayTopic runs, as plain dicts, and how to read them back
(pure: no cluster, no I/O).

  Job      t-rebalance-e<E>-to<N>[-r<k>]   ``delayq-spark rebalance --shards N``: one per
                                          change of the shard count (E: the topology
                                          epoch the change began at), ``-r<k>`` for the
                                          k-th retry after a failed one
  CronJob  t-compact                      ``delayq-spark compact`` on
                                          ``spec.compaction.schedule``

Both run the topic's image (or ``spec.spark.image``) with ``spec.spark``'s
master (``local[2]`` by default: Spark inside the Job's pod), resources and
settings, against the master Service of shard 0 (shard 0 is never removed; the
job reads the shard map there and reaches every shard through it). The pod
meets the ``restricted`` Pod Security Standard like the shards' pods; Spark
writes only under an ``emptyDir`` at /tmp. ``restartPolicy: Never`` and
``backoffLimit`` (``spec.spark.backoffLimit``) make a failed pod a new pod,
and a failed Job a Job the resharding driver may retry (``retry_delay``).

Reading back: ``job_state`` (running, succeeded or failed, from the Job's
conditions), ``attempts`` (pods the Job ran), ``pod_failure`` (why a failed pod
failed: the line of its termination message that says so, ``failure_line``),
and ``outdated`` (a failed Job made from a spec that has changed since: retried
at once, without waiting out the back-off).
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from .crd import GROUP, LABEL_TOPIC, MANAGER, owned_meta, shard_name
from .podtls import tls_env, tls_mounts, tls_volumes
from .security import TMP, container_security, pod_security, tmp_mount
from .spec import DelayTopicSpec

__all__ = [
    "LABEL_CHANGE",
    "LABEL_JOB",
    "LABEL_RETRY",
    "SPEC_HASH",
    "JobState",
    "attempts",
    "change_id",
    "compaction_cronjob",
    "compaction_name",
    "failure_line",
    "job_failure",
    "job_state",
    "outdated",
    "pod_failure",
    "rebalance_job",
    "rebalance_name",
    "retry_delay",
]

LABEL_JOB = f"{GROUP}/job"
"""``rebalance`` or ``compact``."""
LABEL_CHANGE = f"{GROUP}/change"
"""A rebalance Job's change of the shard count: ``e<E>-to<N>``."""
LABEL_RETRY = f"{GROUP}/retry"
SPEC_HASH = f"{GROUP}/spec-hash"
"""A hash of what a Job runs (image, arguments but its own name, resources), as
the operator made it: the API server normalises quantities, so the live object
is not compared."""
FINISHED_TTL_S = 86_400
"""A finished Job (and its pods, for ``kubectl logs``) is kept a day. A rebalance
that succeeded is switched within seconds; one the driver never saw (an operator
down a whole day) is run again under the same name: the job is idempotent."""
RETRY_FIRST_S, RETRY_MAX_S = 30.0, 600.0
FAILURE_CHARS = 512


class JobState(enum.Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


def change_id(epoch: int, target: int) -> str:
    """A change of the shard count: the topology epoch it began at, and its
    target. Unique: the epoch rises with every map written."""
    return f"e{epoch}-to{target}"


def rebalance_name(topic: str, epoch: int, target: int, retry: int = 0) -> str:
    tail = f"-r{retry}" if retry else ""
    return f"{topic}-rebalance-{change_id(epoch, target)}{tail}"


def compaction_name(topic: str) -> str:
    return f"{topic}-compact"


def _server(body: dict[str, Any], spec: DelayTopicSpec) -> str:
    """Shard 0's master Service: any node serves the shard map."""
    meta = body["metadata"]
    return f"{shard_name(meta['name'], 0)}.{meta['namespace']}.svc:{spec.port}"


def _args(body: dict[str, Any], spec: DelayTopicSpec) -> list[str]:
    """The options every job takes (after its command's own)."""
    # Spark resolves its Ivy directory under the user's home even with no
    # packages to fetch: on a read-only root it must be under /tmp
    conf = {"spark.jars.ivy": f"{TMP}/.ivy2", **spec.spark.conf}
    out = ["--server", _server(body, spec), "--master", spec.spark.master]
    for key in sorted(conf):
        out += ["--conf", f"{key}={conf[key]}"]
    return out


def _labels(body: dict[str, Any], job: str, extra: Mapping[str, str]) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "delayq",
        "app.kubernetes.io/managed-by": MANAGER,
        LABEL_TOPIC: body["metadata"]["name"],
        LABEL_JOB: job,
        **extra,
    }


def _pod(
    body: dict[str, Any], spec: DelayTopicSpec, args: list[str], labels: dict[str, str]
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": spec.tolerations,
        "securityContext": pod_security(),
        "containers": [
            {
                "name": "spark",
                "image": spec.spark.image or spec.image,
                "command": ["delayq-spark"],
                "args": args,
                "env": [
                    {"name": "HOME", "value": TMP},
                    {"name": "DELAYQ_TOPIC", "value": body["metadata"]["name"]},
                    *tls_env(spec.tls),
                ],
                "resources": spec.spark.resources,
                "securityContext": container_security(),
                # the job's last line says why it failed: the pod's termination
                # message, which the operator reports
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [tmp_mount(), *tls_mounts(spec.tls)],
            }
        ],
        "volumes": [
            {"name": "tmp", "emptyDir": {}},
            *tls_volumes(spec.tls, body["metadata"]["name"]),
        ],
    }
    if spec.affinity:  # (the shards' default anti-affinity is theirs only)
        pod["affinity"] = spec.affinity
    return {"metadata": {"labels": labels}, "spec": pod}


def rebalance_job(
    body: dict[str, Any], spec: DelayTopicSpec, *, epoch: int, target: int, retry: int = 0
) -> dict[str, Any]:
    """The Job that moves the messages of the change ``change_id(epoch, target)``
    (its ``retry``-th retry); the caller switches the map once it succeeded."""
    topic = body["metadata"]["name"]
    name = rebalance_name(topic, epoch, target, retry)
    extra = {LABEL_CHANGE: change_id(epoch, target), LABEL_RETRY: str(retry)}
    labels = _labels(body, "rebalance", extra)
    args = ["rebalance", "--shards", str(target), "--job", name, *_args(body, spec)]
    meta = owned_meta(name, body, {})
    meta["labels"] = labels
    template = _pod(body, spec, args, labels)
    meta["annotations"] = {SPEC_HASH: _shape(template)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": spec.spark.backoff_limit,
            "ttlSecondsAfterFinished": FINISHED_TTL_S,
            "template": template,
        },
    }


def compaction_cronjob(body: dict[str, Any], spec: DelayTopicSpec) -> dict[str, Any] | None:
    """The compaction CronJob, or None when ``spec.compaction.schedule`` is unset."""
    if not spec.compaction_schedule:
        return None
    topic = body["metadata"]["name"]
    labels = _labels(body, "compact", {})
    meta = owned_meta(compaction_name(topic), body, {})
    meta["labels"] = labels
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta,
        "spec": {
            "schedule": spec.compaction_schedule,
            "concurrencyPolicy": "Forbid",  # one compaction of a topic at a time
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": labels},
                "spec": {
                    "backoffLimit": spec.spark.backoff_limit,
                    "template": _pod(body, spec, ["compact", *_args(body, spec)], labels),
                },
            },
        },
    }


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in status.get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return dict(c)
    return None


def job_state(status: Mapping[str, Any] | None) -> JobState:
    """A Job's state from its ``status``: finished once the Job controller says
    Complete or Failed (backoffLimit exhausted), else running."""
    status = status or {}
    if _condition(status, "Complete"):
        return JobState.SUCCEEDED
    if _condition(status, "Failed"):
        return JobState.FAILED
    return JobState.RUNNING


def job_failure(status: Mapping[str, Any] | None) -> tuple[str, str]:
    """(when, why) a failed Job failed, from its Failed condition."""
    c = _condition(status or {}, "Failed") or {}
    return str(c.get("lastTransitionTime") or ""), str(c.get("message") or "")


def attempts(status: Mapping[str, Any] | None) -> int:
    """Pods the Job ran or runs."""
    status = status or {}
    return sum(int(status.get(k) or 0) for k in ("active", "succeeded", "failed"))


_EXCEPTION = re.compile(r"^[\w.$]+(Error|Exception)\b[^:]*: ")


def failure_line(message: str) -> str:
    """The line of a failed job's output that says why: ``delayq-spark``'s own
    one-line error when there is one, else the last exception line of a trace
    (Python's or the JVM's), else the last line."""
    lines = [ln.strip() for ln in message.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("at ") and ln != "..."]
    ours = [ln for ln in lines if ln.startswith("delayq-spark ")]
    exceptions = [ln.lstrip(": ") for ln in lines if _EXCEPTION.match(ln.lstrip(": "))]
    line = (ours or exceptions or lines or [""])[-1]
    return line[:FAILURE_CHARS]


def pod_failure(pod_status: Mapping[str, Any]) -> str:
    """Why a failed pod of a Job failed: its container's termination message (its
    last log lines: ``FallbackToLogsOnError``) read by ``failure_line``, with the
    exit code; empty when the pod has not terminated."""
    for c in pod_status.get("containerStatuses") or []:
        term = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get(
            "terminated"
        )
        if not term:
            continue
        code = term.get("exitCode")
        line = failure_line(str(term.get("message") or ""))
        reason = str(term.get("reason") or "Error")
        return f"{line} (exit code {code})" if line else f"{reason}, exit code {code}"
    return ""


def _shape(template: Mapping[str, Any]) -> str:
    c = template["spec"]["containers"][0]
    args = list(c["args"])
    if "--job" in args:  # the name differs from retry to retry
        i = args.index("--job")
        del args[i : i + 2]
    doc = {"image": c["image"], "args": args, "resources": c.get("resources") or {}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def outdated(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether Job ``existing`` was made from another spec than ``desired`` (what
    it runs: image, arguments, resources; ``SPEC_HASH``)."""
    have = ((existing.get("metadata") or {}).get("annotations") or {}).get(SPEC_HASH)
    return bool(have != desired["metadata"]["annotations"][SPEC_HASH])


def retry_delay(retry: int) -> float:
    """Seconds to wait before the retry after failed Job number ``retry`` (0
    first): 30 s, doubling, at most 10 minutes."""
    return float(min(RETRY_FIRST_S * 2.0 ** max(retry, 0), RETRY_MAX_S))
