"""The operator's desired state, built without a cluster."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from delayq import shardmap
from delayq.addresses import METRICS_PORT
from delayq.control import resharding
from delayq_operator import SpecError, desired_objects, parse_spec
from delayq_operator.security import RUN_AS
from delayq_operator.shardmaps import shard_entry, topology
from delayq_operator.spec import TlsMode, TopicDefaults

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "charts/delayq/crds/delaytopics.delayq.io.yaml"


def topic(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "delayq.io/v1alpha1",
        "kind": "DelayTopic",
        "metadata": {"name": "orders", "namespace": "prod", "uid": "u-1"},
        "spec": spec,
    }


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def the_map(objs: list[dict[str, Any]]) -> shardmap.ShardMap:
    """The shard map in the topic's ConfigMap, read back by the server's parser."""
    (config_map,) = by_kind(objs, "ConfigMap")
    assert config_map["metadata"]["name"] == "orders-shard-map"
    assert set(config_map["data"]) == {"shards.json"}
    return shardmap.parse(config_map["data"]["shards.json"])


def pod_spec(objs: list[dict[str, Any]], shard: int = 0) -> dict[str, Any]:
    return dict(by_kind(objs, "StatefulSet")[shard]["spec"]["template"]["spec"])


def test_each_shard_gets_its_objects_all_owned_by_the_topic() -> None:
    objs = desired_objects(
        topic(
            shards=2,
            replicasPerShard=3,
            replication="sync",
            storage={"size": "5Gi", "storageClassName": "fast"},
        )
    )
    assert len(objs) == 1 + 2 * 4
    assert {o["metadata"]["name"] for o in by_kind(objs, "StatefulSet")} == {
        "orders-shard-0",
        "orders-shard-1",
    }
    for o in objs:
        ref = o["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "DelayTopic",
            "orders",
            "u-1",
            True,
        )
        assert o["metadata"]["namespace"] == "prod"
    sts = by_kind(objs, "StatefulSet")[1]["spec"]
    assert sts["replicas"] == 3
    assert sts["selector"]["matchLabels"] == {"delayq.io/topic": "orders", "delayq.io/shard": "1"}
    pvc = sts["volumeClaimTemplates"][0]["spec"]
    assert (pvc["resources"]["requests"]["storage"], pvc["storageClassName"]) == ("5Gi", "fast")
    container = sts["template"]["spec"]["containers"][0]
    # plain HTTP on the metrics port: a kubelet's gRPC probe cannot speak TLS
    probe = {"path": "/readyz", "port": "metrics", "scheme": "HTTP"}
    assert container["readinessProbe"]["httpGet"] == probe
    assert {"name": "metrics", "containerPort": METRICS_PORT} in container["ports"]
    # the server is NOT_SERVING until recovery ends: the startup probe, not liveness,
    # waits for it (10 minutes), and liveness has no delay of its own to guess
    startup = container["startupProbe"]
    assert startup["httpGet"] == container["readinessProbe"]["httpGet"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 600
    assert container["livenessProbe"] == container["readinessProbe"]
    assert container["args"][container["args"].index("--shard") :][:2] == ["--shard", "1"]
    assert "$(POD_NAME).orders-shard-1-pods.prod.svc:7420" in container["args"]
    args = container["args"]
    # every pod starts as a replica of no one, under its pod name; the operator's
    # keeper promotes one; sync acks wait for a majority of the shard's 3 pods
    assert args[args.index("--role") + 1] == "replica"
    assert args[args.index("--node-name") + 1] == "$(POD_NAME)"
    assert args[args.index("--replication") + 1] == "sync"
    assert args[args.index("--min-insync") + 1] == "2"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["DELAYQ_TOPIC"], env["DELAYQ_SHARD"]) == ("orders", "1")
    assert "DELAYQ_SHARDS" not in env, "a shard count in the pod template would restart every pod"
    mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mount == {
        "data": "/data",
        "shard-map": "/etc/delayq",
        "tmp": "/tmp",
        "tls": "/etc/delayq-tls",
    }
    assert sts["template"]["spec"]["volumes"][0]["configMap"]["name"] == "orders-shard-map"
    anti = sts["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100
    assert sts["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"


def test_master_service_selects_the_master_role() -> None:
    objs = desired_objects(topic(shards=2, replicasPerShard=2))
    masters = [s for s in by_kind(objs, "Service") if "clusterIP" not in s["spec"]]
    assert masters[0]["spec"]["selector"]["delayq.io/role"] == "master"
    headless = [s for s in by_kind(objs, "Service") if s["spec"].get("clusterIP") == "None"]
    assert len(headless) == 2
    # the metrics port on the headless Service only (a ServiceMonitor's one target a
    # pod); the master's carries the clients' ports
    metrics = {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}
    assert all(metrics in s["spec"]["ports"] for s in headless)
    assert [p["name"] for p in masters[0]["spec"]["ports"]] == ["grpc", "rocketmq"]
    assert all(p["spec"]["maxUnavailable"] == 1 for p in by_kind(objs, "PodDisruptionBudget"))


def test_the_map_lists_each_shard_at_addresses_pods_can_dial() -> None:
    objs = desired_objects(topic(shards=2, replicasPerShard=2, port=7500))
    m = the_map(objs)
    assert (m.topology_epoch, m.topic, m.count) == (1, "orders", 2)
    assert m.masters() == (
        "orders-shard-0-0.orders-shard-0-pods.prod.svc:7500",
        "orders-shard-1-0.orders-shard-1-pods.prod.svc:7500",
    ), "a new topic's masters: pod 0 of each shard, by its own address"
    assert m.shards[1].replicas == (
        "orders-shard-1-0.orders-shard-1-pods.prod.svc:7500",
        "orders-shard-1-1.orders-shard-1-pods.prod.svc:7500",
    )
    assert [s.epoch for s in m.shards] == [1, 1]
    # each pod advertises the very address the map lists for it
    args = pod_spec(objs, 1)["containers"][0]["args"]
    advertised = args[args.index("--advertise") + 1]
    assert advertised.replace("$(POD_NAME)", "orders-shard-1-1") == m.shards[1].replicas[1]
    assert by_kind(objs, "ConfigMap")[0]["data"]["shards.json"] == m.dumps()


def test_topology_epoch_rises_only_when_the_map_changes() -> None:
    two = parse_spec(topic(shards=2))
    first = topology("orders", "prod", two)
    assert first.topology_epoch == 1
    assert topology("orders", "prod", two, first) == first, "re-applying keeps the epoch"
    grown = topology("orders", "prod", replace(two, shards=3), first)
    assert (grown.topology_epoch, grown.count) == (2, 3)
    assert grown.shards[:2] == first.shards, "existing shards are listed as before"
    assert topology("orders", "prod", replace(two, shards=3), grown) == grown
    moved = topology("orders", "prod", replace(two, shards=3, port=7500), grown)
    assert moved.topology_epoch == 3
    more = topology("orders", "prod", replace(two, shards=3, replicas_per_shard=2), grown)
    assert more.topology_epoch == 3


def test_topology_names_each_shards_recorded_master_at_its_epoch() -> None:
    spec = parse_spec(topic(shards=2, replicasPerShard=3))
    first = topology("orders", "prod", spec)
    m = topology("orders", "prod", spec, first, masters={0: ("orders-shard-0-2", 4)})
    assert m.shards[0].master == "orders-shard-0-2.orders-shard-0-pods.prod.svc:7420"
    assert [s.epoch for s in m.shards] == [4, 1]
    assert m.shards[0].replicas == first.shards[0].replicas
    assert m.topology_epoch == 2, "a master change is a new map"
    again = topology("orders", "prod", spec, m, masters={0: ("orders-shard-0-2", 4)})
    assert again == m, "the same records: the same map"


def test_topology_epoch_never_goes_below_the_recorded_one() -> None:
    """``floor`` is the epoch the topic's status recorded: a ConfigMap deleted or
    rewritten by hand cannot take the epoch down (servers refuse such a map)."""
    spec = parse_spec(topic(shards=2))
    assert topology("orders", "prod", spec, floor=4).topology_epoch == 5, "ConfigMap lost"
    applied = topology("orders", "prod", spec, floor=4)
    assert topology("orders", "prod", spec, applied, floor=5) == applied, "nothing changed"
    lowered = replace(applied, topology_epoch=2)  # edited by hand to a lower epoch
    assert topology("orders", "prod", spec, lowered, floor=5).topology_epoch == 6
    grown = topology("orders", "prod", replace(spec, shards=3), applied, floor=5)
    assert grown.topology_epoch == 6


def test_desired_objects_write_the_map_they_are_given() -> None:
    fresh = the_map(desired_objects(topic(shards=2)))
    assert fresh == topology("orders", "prod", parse_spec(topic(shards=2)))
    grown = topology("orders", "prod", parse_spec(topic(shards=3)), fresh)
    assert the_map(desired_objects(topic(shards=3), topology_map=grown)) == grown


def test_pods_run_as_the_images_non_root_user_on_a_read_only_root() -> None:
    spec = pod_spec(desired_objects(topic()))
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # writable: the data volume and a small in-memory /tmp (the native gRPC server's
    # Unix socket); the shard map is read-only
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
    assert mounts == {"/data": False, "/etc/delayq": True, "/tmp": False, "/etc/delayq-tls": True}
    (tmp,) = [v for v in spec["volumes"] if v["name"] == "tmp"]
    assert tmp["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Mi"}


def test_the_image_user_is_the_pods_user() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"groupadd --gid {RUN_AS} " in dockerfile
    assert f"useradd --uid {RUN_AS} --gid {RUN_AS} " in dockerfile
    assert re.findall(r"^USER (.*)$", dockerfile, re.M) == [f"{RUN_AS}:{RUN_AS}"]


def test_the_server_reads_the_mounted_map() -> None:
    spec = pod_spec(desired_objects(topic()))
    (container,) = spec["containers"]
    args = container["args"]
    assert args[args.index("--shard-map") :][:2] == ["--shard-map", "/etc/delayq/shards.json"]
    assert "DELAYQ_SHARD_MAP_FILE" not in {e["name"] for e in container["env"]}
    # a directory mount (never subPath): the kubelet updates it in place
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "shard-map"]
    assert "subPath" not in mount and mount["mountPath"] == "/etc/delayq"


def test_the_crd_refuses_the_metrics_port() -> None:
    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = spec["properties"]["port"]["x-kubernetes-validations"]
    assert rules == [
        {
            "rule": f"self != {METRICS_PORT}",
            "message": f"must differ from the metrics port {METRICS_PORT}",
        }
    ]


def test_scaling_up_adds_only_new_shard_objects() -> None:
    two = {o["metadata"]["name"] + o["kind"] for o in desired_objects(topic(shards=2))}
    three = {o["metadata"]["name"] + o["kind"] for o in desired_objects(topic(shards=3))}
    assert two < three
    assert {n for n in three - two if "shard-2" not in n} == set()


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"shards": 0}, "spec.shards"),
        ({"replicasPerShard": 6}, "spec.replicasPerShard"),
        ({"replication": "eventually"}, "spec.replication"),
        ({"precisionMs": "1s"}, "spec.precisionMs"),
        ({"pvcRetention": "Maybe"}, "spec.pvcRetention"),
        ({"port": 7421}, "spec.port"),
        ({"port": 0}, "spec.port"),
        ({"tls": {"secretName": "Not_A_Name"}}, "spec.tls.secretName"),
        ({"tls": {"secretName": 7}}, "spec.tls.secretName"),
        ({"tls": {"requireClientCert": True}}, "spec.tls.requireClientCert"),
        ({"tls": {"secretName": "s", "requireClientCert": "yes"}}, "spec.tls.requireClientCert"),
    ],
)
def test_invalid_specs_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(topic(**spec))
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_the_grpc_port_may_not_be_the_metrics_port() -> None:
    with pytest.raises(SpecError, match=r"^spec\.port: must differ from the metrics port 7421$"):
        parse_spec(topic(port=METRICS_PORT))


def test_defaults() -> None:
    s = parse_spec(topic())
    assert (s.shards, s.replicas_per_shard, s.replication, s.precision_ms) == (1, 1, "async", 1000)


def test_the_objects_follow_the_shards_the_map_lists_in_their_states() -> None:
    """A change of the shard count is the resharding driver's: the objects and the
    map reconcile writes keep the shards the map lists (joining or leaving ones
    too), whatever spec.shards says meanwhile."""
    spec = parse_spec(topic(shards=3))
    first = topology("orders", "prod", spec)
    leaving = resharding.switched(first, 2)
    again = topology("orders", "prod", spec, leaving)
    assert again == leaving, "states kept, nothing else changed: the same map and epoch"
    objs = desired_objects(topic(shards=2), topology_map=again)
    assert len(by_kind(objs, "StatefulSet")) == 3
    assert the_map(objs).changing == shardmap.LEAVING
    moved = topology("orders", "prod", replace(spec, port=7500), leaving)
    assert [e.state for e in moved.shards] == ["active", "active", "leaving"]
    assert moved.topology_epoch == leaving.topology_epoch + 1


def test_a_shard_entry_names_its_master_pod_at_its_epoch_in_its_state() -> None:
    spec = parse_spec(topic(replicasPerShard=2))
    e = shard_entry("orders", "prod", spec, 2, {2: ("orders-shard-2-1", 3)}, shardmap.JOINING)
    assert e.master == "orders-shard-2-1.orders-shard-2-pods.prod.svc:7420"
    assert (e.index, e.epoch, e.state, len(e.replicas)) == (2, 3, shardmap.JOINING, 2)
    assert shard_entry("orders", "prod", spec, 1).master.startswith("orders-shard-1-0.")


@pytest.mark.parametrize(
    ("spark", "field"),
    [
        ({"master": ""}, "spec.spark.master"),
        ({"backoffLimit": -1}, "spec.spark.backoffLimit"),
        ({"backoffLimit": 21}, "spec.spark.backoffLimit"),
        ({"conf": {"spark.x": 1}}, "spec.spark.conf"),
    ],
)
def test_invalid_spark_settings_name_the_field(spark: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(topic(spark=spark))
    assert err.value.field == field


@pytest.mark.parametrize("schedule", ["0 3 * * *", "*/15 * * * 1-5", "@daily"])
def test_compaction_schedules_are_cron(schedule: str) -> None:
    assert parse_spec(topic(compaction={"schedule": schedule})).compaction_schedule == schedule


@pytest.mark.parametrize("schedule", ["daily", "0 3 * *", "TZ=UTC 0 3 * * *", "@often"])
def test_a_schedule_that_is_not_cron_is_refused(schedule: str) -> None:
    with pytest.raises(SpecError, match=r"^spec\.compaction\.schedule: must be a cron"):
        parse_spec(topic(compaction={"schedule": schedule}))


def test_spark_defaults() -> None:
    s = parse_spec(topic()).spark
    assert (s.master, s.image, s.backoff_limit, s.conf, s.resources) == ("local[2]", "", 2, {}, {})
    assert parse_spec(topic()).compaction_schedule == ""


def test_default_image_applies_only_without_spec_image() -> None:
    def image(objs: list[dict[str, Any]]) -> str:
        return str(
            by_kind(objs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]["image"]
        )

    registry = TopicDefaults(image="reg/delayq:9")
    assert image(desired_objects(topic(), defaults=registry)) == "reg/delayq:9"
    assert image(desired_objects(topic(image="mine:1"), defaults=registry)) == "mine:1"


def _opt(container: dict[str, Any], name: str) -> str | None:
    args = container["args"]
    return str(args[args.index(name) + 1]) if name in args else None


def test_by_default_the_operators_certificate_serves_the_admin_port_only() -> None:
    """No spec.tls: the pods mount the operator's ``<topic>-shard-tls`` exactly as a
    user's Secret; the admin port takes the namespace CA's client certificates, the
    public ports stay plaintext unless spec.publicTls."""
    tls = parse_spec(topic()).tls
    assert (tls.mode, tls.issued, tls.public, tls.secret("orders")) == (
        TlsMode.OPERATOR,
        True,
        False,
        "orders-shard-tls",
    )
    pod = pod_spec(desired_objects(topic()))
    assert {"name": "tls", "secret": {"secretName": "orders-shard-tls", "defaultMode": 0o440}} in (
        pod["volumes"]
    )
    (container,) = pod["containers"]
    assert _opt(container, "--admin-client-ca") == "/etc/delayq-tls/ca.crt"
    assert _opt(container, "--public-tls") == "false"
    assert _opt(container, "--tls-client-ca") is None
    public = pod_spec(desired_objects(topic(publicTls=True)))["containers"][0]
    assert _opt(public, "--public-tls") is None and _opt(public, "--tls-cert")


def test_tls_mode_disabled_mounts_no_secret_and_serves_plaintext() -> None:
    spec = topic(tls={"mode": "disabled"})
    assert not parse_spec(spec).tls.enabled
    pod = pod_spec(desired_objects(spec))
    assert [v["name"] for v in pod["volumes"]] == ["shard-map", "tmp"]
    assert not [a for a in pod["containers"][0]["args"] if a.startswith(("--tls", "--public"))]


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"tls": {"mode": "off"}}, "spec.tls.mode", "must be one of operator, secret, disabled"),
        ({"tls": {"mode": "secret"}}, "spec.tls.mode", "needs spec.tls.secretName"),
        ({"tls": {"mode": "disabled", "secretName": "x"}}, "spec.tls.mode", "goes without"),
        ({"tls": {"mode": "disabled"}, "publicTls": True}, "spec.publicTls", "needs TLS"),
        ({"publicTls": "yes"}, "spec.publicTls", "true or false"),
        ({"tls": {"requireClientCert": True}}, "spec.tls.requireClientCert", "secretName"),
        (
            {"tls": {"secretName": "x", "requireClientCert": True}, "publicTls": False},
            "spec.tls.requireClientCert",
            "spec.publicTls",
        ),
    ],
)
def test_tls_settings_that_do_not_go_together_name_the_field(
    spec: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(SpecError, match=words) as err:
        parse_spec(topic(**spec))
    assert err.value.field == field


def test_a_users_secret_wins_and_serves_the_public_port_unless_told_not_to() -> None:
    tls = parse_spec(topic(tls={"secretName": "mine"})).tls
    assert (tls.mode, tls.issued, tls.public, tls.secret("orders")) == (
        TlsMode.SECRET,
        False,
        True,
        "mine",
    )
    admin_only = parse_spec(topic(tls={"secretName": "mine"}, publicTls=False)).tls
    assert not admin_only.public


@pytest.mark.parametrize("mutual", [False, True])
def test_tls_mounts_the_secret_and_serves_both_ports_with_it(mutual: bool) -> None:
    objs = desired_objects(topic(tls={"secretName": "orders-tls", "requireClientCert": mutual}))
    pod = pod_spec(objs)
    (container,) = pod["containers"]
    assert {"name": "tls", "secret": {"secretName": "orders-tls", "defaultMode": 0o440}} in pod[
        "volumes"
    ]
    assert {"name": "tls", "mountPath": "/etc/delayq-tls", "readOnly": True} in container[
        "volumeMounts"
    ]
    # fsGroup makes the 0440 key readable by the server's user
    assert pod["securityContext"]["fsGroup"] == RUN_AS
    args = container["args"]

    def opt(name: str) -> str | None:
        return args[args.index(name) + 1] if name in args else None

    assert (opt("--tls-cert"), opt("--tls-key")) == (
        "/etc/delayq-tls/tls.crt",
        "/etc/delayq-tls/tls.key",
    )
    # the admin port takes only certificates of the Secret's CA (the operator's, the
    # other pods', the jobs'); the public port too when mutual TLS is asked for
    assert opt("--admin-client-ca") == "/etc/delayq-tls/ca.crt"
    assert opt("--tls-client-ca") == ("/etc/delayq-tls/ca.crt" if mutual else None)
    # the probe stays plain HTTP on the metrics port
    assert "httpGet" in container["readinessProbe"]
    assert parse_spec(topic(tls={"secretName": "orders-tls"})).tls.enabled


def test_the_crd_takes_tls_as_the_operator_does() -> None:
    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    tls = spec["properties"]["tls"]
    assert set(tls["properties"]) == {"secretName", "requireClientCert", "mode"}
    assert tls["properties"]["mode"]["enum"] == [m.value for m in TlsMode]
    assert spec["properties"]["publicTls"]["type"] == "boolean"
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert set(status["properties"]["tls"]["properties"]) == {
        "mode",
        "secretName",
        "publicTls",
        "notAfter",
        "renewAt",
    }
    pattern = re.compile(tls["properties"]["secretName"]["pattern"])
    assert pattern.fullmatch("orders-tls.v2") and not pattern.fullmatch("Not_A_Name")
