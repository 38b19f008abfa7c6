"""The Spark Jobs a DelayTopic runs (rebalance Job, compaction CronJob), and how
their state and failures are read back, without a cluster."""

from __future__ import annotations

from typing import Any

import pytest

from delayq_operator import jobs, parse_spec
from delayq_operator.jobs import JobState


def topic(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "delayq.io/v1alpha1",
        "kind": "DelayTopic",
        "metadata": {"name": "orders", "namespace": "prod", "uid": "u-1"},
        "spec": {"shards": 3, **spec},
    }


def job(body: dict[str, Any], *, retry: int = 0) -> dict[str, Any]:
    return jobs.rebalance_job(body, parse_spec(body), epoch=7, target=3, retry=retry)


def container(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    pod = (spec.get("jobTemplate", {}).get("spec") or spec)["template"]["spec"]
    return dict(pod["containers"][0])


def test_the_rebalance_job_runs_delayq_spark_against_shard_0s_service() -> None:
    j = job(topic())
    assert (j["apiVersion"], j["kind"]) == ("batch/v1", "Job")
    assert j["metadata"]["name"] == "orders-rebalance-e7-to3"
    assert j["metadata"]["ownerReferences"][0]["kind"] == "DelayTopic"
    assert j["metadata"]["labels"]["delayq.io/change"] == "e7-to3"
    assert j["metadata"]["labels"]["delayq.io/topic"] == "orders"
    assert "delayq.io/shard" not in j["metadata"]["labels"], "never a shard's pod"
    c = container(j)
    assert (c["image"], c["command"]) == ("delayq:0.1.0", ["delayq-spark"])
    assert c["args"] == [
        "rebalance", "--shards", "3", "--job", "orders-rebalance-e7-to3",
        "--server", "orders-shard-0.prod.svc:7420", "--master", "local[2]",
        "--conf", "spark.jars.ivy=/tmp/.ivy2",
    ]  # fmt: skip
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    pod = j["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and j["spec"]["backoffLimit"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"], "Spark writes under /tmp only"
    assert "affinity" not in pod, "the shards' anti-affinity is theirs"
    assert job(topic(), retry=2)["metadata"]["name"] == "orders-rebalance-e7-to3-r2"


def test_with_tls_a_job_presents_the_pods_certificate() -> None:
    c = container(job(topic(tls={"secretName": "orders-tls"})))
    env = {e["name"]: e["value"] for e in c["env"]}
    assert (env["DELAYQ_TLS_CA"], env["DELAYQ_TLS_CERT"], env["DELAYQ_TLS_KEY"]) == (
        "/etc/delayq-tls/ca.crt",
        "/etc/delayq-tls/tls.crt",
        "/etc/delayq-tls/tls.key",
    )
    assert {"name": "tls", "mountPath": "/etc/delayq-tls", "readOnly": True} in c["volumeMounts"]
    cron = jobs.compaction_cronjob(
        topic(tls={"secretName": "orders-tls"}, compaction={"schedule": "@daily"}),
        parse_spec(topic(tls={"secretName": "orders-tls"}, compaction={"schedule": "@daily"})),
    )
    assert cron is not None and "DELAYQ_TLS_CERT" in {e["name"] for e in container(cron)["env"]}
    assert env["DELAYQ_TLS_PUBLIC"] == "true"  # the user's certificate serves both ports
    # the operator's certificate by default: the topic's Secret, admin ports only
    default = container(job(topic()))
    env = {e["name"]: e["value"] for e in default["env"]}
    assert (env["DELAYQ_TLS_CERT"], env["DELAYQ_TLS_PUBLIC"]) == (
        "/etc/delayq-tls/tls.crt",
        "false",
    )
    pod = job(topic())["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": "orders-shard-tls", "defaultMode": 0o440}} in (
        pod["volumes"]
    )
    disabled = container(job(topic(tls={"mode": "disabled"})))
    assert "DELAYQ_TLS_CA" not in {e["name"] for e in disabled["env"]}


def test_spec_spark_sets_master_image_resources_settings_and_retries() -> None:
    spark = {
        "master": "spark://spark-master:7077",
        "image": "delayq-spark:1",
        "resources": {"limits": {"memory": "2Gi"}},
        "backoffLimit": 0,
        "conf": {"spark.executor.memory": "2g"},
    }
    j = job(topic(spark=spark, affinity={"nodeAffinity": {}}, tolerations=[{"key": "k"}]))
    c = container(j)
    assert c["image"] == "delayq-spark:1"
    assert c["resources"] == {"limits": {"memory": "2Gi"}}
    args = c["args"]
    assert args[args.index("--master") + 1] == "spark://spark-master:7077"
    assert "spark.executor.memory=2g" in args
    assert j["spec"]["backoffLimit"] == 0
    assert j["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {}}
    assert j["spec"]["template"]["spec"]["tolerations"] == [{"key": "k"}]


def test_a_job_is_outdated_when_what_it_runs_changed_not_its_name() -> None:
    first = job(topic())
    assert not jobs.outdated(first, job(topic(), retry=3)), "only the name differs"
    fixed = job(topic(spark={"master": "local[4]"}))
    assert jobs.outdated(first, fixed)
    assert jobs.outdated(first, job(topic(image="delayq:0.2.0")))
    assert jobs.outdated({"metadata": {}}, fixed), "a Job without the hash: made by someone else"


def test_the_compaction_cronjob_exists_only_with_a_schedule() -> None:
    assert jobs.compaction_cronjob(topic(), parse_spec(topic())) is None
    body = topic(compaction={"schedule": "0 3 * * *"}, spark={"master": "local[4]"})
    cron = jobs.compaction_cronjob(body, parse_spec(body))
    assert cron is not None
    assert (cron["kind"], cron["metadata"]["name"]) == ("CronJob", "orders-compact")
    assert cron["spec"]["schedule"] == "0 3 * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    c = container(cron)
    assert c["args"][:5] == [
        "compact",
        "--server",
        "orders-shard-0.prod.svc:7420",
        "--master",
        "local[4]",
    ]
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def condition(type_: str, when: str = "2026-11-26T10:00:00Z", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": "True", "lastTransitionTime": when, "message": message}


def test_a_jobs_state_is_the_job_controllers_final_condition() -> None:
    assert jobs.job_state(None) is JobState.RUNNING
    assert jobs.job_state({"active": 1}) is JobState.RUNNING
    assert jobs.job_state({"conditions": [condition("Complete")]}) is JobState.SUCCEEDED
    failed = {"failed": 3, "conditions": [condition("FailureTarget"), condition("Failed")]}
    assert jobs.job_state(failed) is JobState.FAILED
    assert jobs.job_state({"conditions": [condition("FailureTarget")]}) is JobState.RUNNING
    assert jobs.attempts(failed) == 3 and jobs.attempts({"active": 1, "failed": 1}) == 2
    msg = "Job has reached the specified backoff limit"
    assert jobs.job_failure({"conditions": [condition("Failed", message=msg)]}) == (
        "2026-11-26T10:00:00Z",
        msg,
    )


JVM_TRACE = """\
26/11/26 21:05:31 ERROR StandaloneSchedulerBackend: Application has been killed. Reason: All masters are unresponsive! Giving up.
Traceback (most recent call last):
  File "/work/k8s/spark/delayq_spark/session.py", line 40, in spark_session
    spark = builder.getOrCreate()
py4j.protocol.Py4JJavaError: An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.
: java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.
This stopped SparkContext was created at:
\tat org.apache.spark.api.java.JavaSparkContext.<init>(JavaSparkContext.scala:59)
\tat java.base/java.lang.Thread.run(Thread.java:840)
"""  # noqa: E501


@pytest.mark.parametrize(
    ("message", "line"),
    [
        (
            "WARN x\ndelayq-spark rebalance: shard 2 does not answer\n",
            "delayq-spark rebalance: shard 2 does not answer",
        ),
        (
            JVM_TRACE,
            "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.",
        ),
        ("some\nlast words\n\n", "last words"),
        ("", ""),
    ],
)
def test_the_failure_line_is_the_one_that_says_why(message: str, line: str) -> None:
    assert jobs.failure_line(message) == line


def test_a_failed_pod_says_why_with_its_exit_code() -> None:
    terminated = {"exitCode": 1, "reason": "Error", "message": "x\ndelayq-spark rebalance: no"}
    pod = {"containerStatuses": [{"state": {"terminated": terminated}}]}
    assert jobs.pod_failure(pod) == "delayq-spark rebalance: no (exit code 1)"
    killed = {
        "containerStatuses": [{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]
    }
    assert jobs.pod_failure(killed) == "OOMKilled, exit code 137"
    assert jobs.pod_failure({"containerStatuses": [{"state": {"running": {}}}]}) == ""


def test_retries_back_off() -> None:
    assert [jobs.retry_delay(r) for r in range(7)] == [30, 60, 120, 240, 480, 600, 600]
