"""Push groups on Kubernetes (``pushspec``): ``spec.groups[].push`` parsed and
checked by the server's own ``delivery.pushtarget.check``, the client's value of
it, what the pods mount and are passed (``spec.pushEgress.allow``, the
operator's default allow-list), the status and events without credentials, and
the CRD's schema against the server's bounds. Pure: no cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from delayq.delivery import pushtarget
from delayq.push.egress import parse_allow
from delayq_operator import desired_objects, parse_spec
from delayq_operator.groupkeeper import from_client, to_client
from delayq_operator.groupplan import Observed, group_status, plan
from delayq_operator.groups import describe, parse_groups
from delayq_operator.main import parse_args
from delayq_operator.memo import Settings
from delayq_operator.pushspec import (
    PUSH_DIR,
    PushSpec,
    parse_push,
    push_args,
    push_mounts,
    push_volumes,
)
from delayq_operator.spec import PodPushSpec, SpecError, TopicDefaults
from tests.k8s.support.kube import CRD

URL = "https://hooks.example.com/delayq/in"


def topic(groups: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "delayq.io/v1alpha1",
        "kind": "DelayTopic",
        "metadata": {"name": "orders", "namespace": "prod", "uid": "u-1"},
        "spec": {"groups": groups, **spec},
    }


def group(name: str = "g", **push: Any) -> dict[str, Any]:
    return {"name": name, "push": {"url": URL, **push}}


def push_of(doc: dict[str, Any]) -> PushSpec:
    (g,) = parse_groups(topic([doc]))
    assert g.policy.push is not None
    return g.policy.push


def as_target(p: PushSpec) -> pushtarget.PushTarget:
    return pushtarget.PushTarget(
        url=p.url,
        method=p.method,
        headers=p.headers,
        timeout_ms=p.timeout_ms,
        ca_bundle=p.ca_bundle,
        secret_ref=p.secret_ref,
    )


PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_a_full_push_entry() -> None:
    got = push_of(
        group(
            method="PUT",
            headers={"X-Tenant": "acme", "authorization": "Bearer t"},
            timeout="2500ms",
            caBundle=PEM,
            secretRef={"name": "hook-signing", "key": "current"},
        )
    )
    assert got == PushSpec(
        url=URL,
        method="PUT",
        headers=(("authorization", "Bearer t"), ("X-Tenant", "acme")),
        timeout_ms=2500,
        ca_bundle=PEM,
        secret_name="hook-signing",
        secret_key="current",
    )
    assert got.secret_ref == "hook-signing/current"


def test_defaults_are_the_servers() -> None:
    got = push_of(group())
    assert (got.method, got.headers, got.timeout_ms, got.ca_bundle) == ("POST", (), 10_000, "")
    assert got.timeout_ms == pushtarget.DEFAULT_TIMEOUT_MS
    assert got.secret_ref == "" and got.secret_name == ""  # unsigned
    assert push_of(group(secretRef={"name": "s"})).secret_ref == "s"  # every key of it
    (pull,) = parse_groups(topic([{"name": "p"}]))
    assert pull.policy.push is None


@pytest.mark.parametrize(
    "push",
    [
        {},
        {"method": "PATCH", "timeout": "100ms"},
        {"timeout": "60s", "headers": {"b": "2", "A": "1", "c": ""}},
        {"secretRef": {"name": "a.b-c", "key": "k_1.x"}, "caBundle": PEM},
        {"url": "http://user:pw@10.1.2.3:8080/p?q=1"},
    ],
)
def test_what_the_operator_sets_the_server_stores_as_it_is(push: dict[str, Any]) -> None:
    """The server's ``check`` changes nothing of the target the operator sets: read
    back, it compares equal, so a converged push group is never set again."""
    want = as_target(push_of(group(**push)))
    assert pushtarget.check(want) == want


@pytest.mark.parametrize(
    ("push", "field"),
    [
        ({"url": None}, "spec.groups[0].push.url"),
        ({"url": "ftp://hooks.example.com/x"}, "spec.groups[0].push.url"),
        ({"url": "https://hooks.example.com/x#frag"}, "spec.groups[0].push.url"),
        ({"url": "https:///nohost"}, "spec.groups[0].push.url"),
        ({"url": "https://h.example/" + "x" * 2048}, "spec.groups[0].push.url"),
        ({"method": "GET"}, "spec.groups[0].push.method"),
        ({"method": "post"}, "spec.groups[0].push.method"),
        ({"headers": {"Host": "elsewhere"}}, "spec.groups[0].push.headers"),
        ({"headers": {"webhook-id": "x"}}, "spec.groups[0].push.headers"),
        ({"headers": {"bad name": "x"}}, "spec.groups[0].push.headers"),
        ({"headers": {"X-A": "line\nbreak"}}, "spec.groups[0].push.headers.X-A"),
        ({"headers": {"X-A": 1}}, "spec.groups[0].push.headers"),
        ({"headers": ["X-A"]}, "spec.groups[0].push.headers"),
        ({"timeout": "61s"}, "spec.groups[0].push.timeout"),
        ({"timeout": "99ms"}, "spec.groups[0].push.timeout"),
        ({"timeout": 5}, "spec.groups[0].push.timeout"),
        ({"caBundle": "not a certificate"}, "spec.groups[0].push.caBundle"),
        ({"caBundle": "x" * 65_537}, "spec.groups[0].push.caBundle"),
        ({"secretRef": "hook-signing"}, "spec.groups[0].push.secretRef"),
        ({"secretRef": {"name": "Not_A_Secret"}}, "spec.groups[0].push.secretRef.name"),
        ({"secretRef": {}}, "spec.groups[0].push.secretRef.name"),
        ({"secretRef": {"name": "s", "key": "..data"}}, "spec.groups[0].push.secretRef.key"),
        ({"secretRef": {"name": "s", "key": "a/b"}}, "spec.groups[0].push.secretRef.key"),
    ],
)
def test_a_bad_push_names_its_field(push: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_groups(topic([group(**push)]))
    assert e.value.field == field


def test_a_push_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(SpecError) as e:
        parse_push("https://hooks.example.com", "spec.groups[3].push")
    assert e.value.field == "spec.groups[3].push"


def test_the_clients_target_is_the_operators_both_ways() -> None:
    (g,) = parse_groups(
        topic([group(headers={"X-B": "2", "x-a": "1"}, secretRef={"name": "s", "key": "k"})])
    )
    got = to_client(g.policy)
    assert got.push is not None
    assert (got.push.url, got.push.method, got.push.secret_ref) == (URL, "POST", "s/k")
    assert dict(got.push.headers) == {"X-B": "2", "x-a": "1"}
    assert from_client(got) == g.policy
    (pull,) = parse_groups(topic([{"name": "p"}]))
    assert to_client(pull.policy).push is None
    assert from_client(to_client(pull.policy)) == pull.policy


def test_a_changed_target_is_set_again_and_a_removed_one_goes_back_to_pull() -> None:
    (old,) = parse_groups(topic([group(timeout="5s")]))
    (new,) = parse_groups(topic([group(timeout="6s")]))
    (pull,) = parse_groups(topic([{"name": "g"}]))
    held = {"g": Observed(name="g", policy=old.policy)}
    assert plan([old], set(), held) == []
    assert plan([new], set(), held) == [("g", new.policy)]
    assert plan([pull], set(), held) == [("g", pull.policy)]


def test_status_and_events_show_no_credentials_query_or_secret() -> None:
    url = "https://bob:hunter2@hooks.example.com:8443/in?token=s3cr3t"
    signed = group(url=url, secretRef={"name": "hook-signing"})
    (g, p) = parse_groups(topic([signed, {"name": "p"}]))
    entries = group_status([g, p], {}, [("g", g.policy)], {})
    assert entries[0]["push"] == {
        "target": "https://hooks.example.com:8443/in",
        "secretRef": "hook-signing",
    }
    assert "push" not in entries[1]
    (unsigned,) = parse_groups(topic([group()]))
    assert group_status([unsigned], {}, [], {})[0]["push"] == {"target": URL}
    line = describe(g.policy)
    assert line.endswith(
        "push POST https://hooks.example.com:8443/in (secret hook-signing, timeout 10000ms)"
    )
    for text in (json.dumps(entries), line):
        assert "hunter2" not in text and "s3cr3t" not in text and "bob" not in text


def test_pods_mount_each_secret_once_and_get_the_push_flags() -> None:
    body = topic(
        [
            group("a", secretRef={"name": "zeta"}),
            group("b", secretRef={"name": "alpha", "key": "current"}),
            group("c", secretRef={"name": "zeta", "key": "previous"}),
            group("d"),
            {"name": "pull"},
        ],
        pushEgress={"allow": ["10.0.0.0/8", "127.0.0.1/32"]},
    )
    spec = parse_spec(body, TopicDefaults(push_allow=("192.168.0.0/16", "10.0.0.0/8")))
    assert spec.push == PodPushSpec(
        secrets=("alpha", "zeta"), allow=("10.0.0.0/8", "127.0.0.1/32", "192.168.0.0/16")
    )
    (sts,) = [o for o in desired_objects(body) if o["kind"] == "StatefulSet"]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for name in ("alpha", "zeta"):
        mount = mounts[f"{PUSH_DIR}/{name}"]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["secret"] == {
            "secretName": name,
            "optional": True,  # a missing Secret holds no pod back
            "defaultMode": 0o440,
        }
    assert len([v for v in pod["volumes"] if "secret" in v]) == 3  # + the TLS Secret
    args = container["args"]
    assert args[args.index("--push-secret-dir") + 1] == PUSH_DIR
    assert args[args.index("--push-allow") + 1] == "10.0.0.0/8,127.0.0.1/32"  # no defaults here
    defaulted = desired_objects(body, defaults=TopicDefaults(push_allow=("192.168.0.0/16",)))
    (sts,) = [o for o in defaulted if o["kind"] == "StatefulSet"]
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--push-allow") + 1] == "10.0.0.0/8,127.0.0.1/32,192.168.0.0/16"


def test_a_topic_without_push_keeps_its_pod_template() -> None:
    """No push group, no allow-list: no flag and no volume, so an operator upgrade
    does not roll the pods of every topic."""
    plain = topic([{"name": "pull"}])
    spec = parse_spec(plain)
    assert spec.push == PodPushSpec()
    assert push_args(spec.push) == push_volumes(spec.push) == push_mounts(spec.push) == []
    (sts,) = [o for o in desired_objects(plain) if o["kind"] == "StatefulSet"]
    text = json.dumps(sts)
    assert "push" not in text
    # an allow-list alone passes the flag, mounts nothing
    only = PodPushSpec(allow=("10.0.0.0/8",))
    assert push_args(only) == ["--push-allow", "10.0.0.0/8"] and push_volumes(only) == []


def test_a_bad_group_elsewhere_never_holds_the_pods_back() -> None:
    """The pods need only the Secrets' names; the rest of a group is the groups'
    round's to refuse (it names the field in its event)."""
    body = topic([group(secretRef={"name": "s"}, method="GET"), {"name": "x", "rate": -1}])
    assert parse_spec(body).push.secrets == ("s",)
    with pytest.raises(SpecError):
        parse_groups(body)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"pushEgress": {"allow": ["10.0.0.0/33"]}}, "spec.pushEgress.allow"),
        ({"pushEgress": {"allow": ["localhost"]}}, "spec.pushEgress.allow"),
        ({"pushEgress": {"allow": [167772160]}}, "spec.pushEgress.allow"),
        ({"pushEgress": {"allow": "10.0.0.0/8"}}, "spec.pushEgress.allow"),
        ({"pushEgress": {"allow": ["10.0.0.0/8"] * 65}}, "spec.pushEgress.allow"),
        ({"pushEgress": ["10.0.0.0/8"]}, "spec.pushEgress"),
        (
            {"groups": [{"name": "g", "push": {"url": URL, "secretRef": {"name": "A"}}}]},
            "spec.groups[0].push.secretRef.name",
        ),
    ],
)
def test_a_bad_pod_push_spec_names_its_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({"metadata": {"name": "t"}, "spec": spec})
    assert e.value.field == field


def test_an_allow_list_entry_is_taken_as_the_server_takes_it() -> None:
    """Host bits set are the network's (the server's ``parse_allow``, not strict)."""
    spec = parse_spec(topic([], pushEgress={"allow": ["10.1.2.3/8", "fd00::1/8"]}))
    assert spec.push.allow == ("10.1.2.3/8", "fd00::1/8")
    assert parse_allow(spec.push.allow) == ("10.0.0.0/8", "fd00::/8")


def test_the_operators_default_allow_list() -> None:
    args = parse_args(["--push-allow", "10.0.0.0/8, 127.0.0.1/32"])
    assert args.push_allow == ("10.0.0.0/8", "127.0.0.1/32")
    assert parse_args([]).push_allow == ()
    defaults = Settings(default_image="i:1", push_allow=args.push_allow).topic_defaults
    assert defaults == TopicDefaults(image="i:1", push_allow=("10.0.0.0/8", "127.0.0.1/32"))
    with pytest.raises(SystemExit):
        parse_args(["--push-allow", "10.0.0.0/8,nope"])


def test_the_crd_schema_has_the_servers_bounds() -> None:
    doc = yaml.safe_load(CRD.read_text())
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]["properties"]
    push = spec["groups"]["items"]["properties"]["push"]
    fields = push["properties"]
    assert push["required"] == ["url"]
    assert tuple(fields["method"]["enum"]) == pushtarget.METHODS
    assert fields["url"]["maxLength"] == pushtarget.MAX_URL_LEN
    assert fields["headers"]["maxProperties"] == pushtarget.MAX_HEADERS
    assert fields["caBundle"]["maxLength"] == pushtarget.MAX_CA_BUNDLE
    (rule,) = fields["timeout"]["x-kubernetes-validations"]
    assert f"duration('{pushtarget.MIN_TIMEOUT_MS}ms')" in rule["rule"]
    assert f"duration('{pushtarget.MAX_TIMEOUT_MS // 1000}s')" in rule["rule"]
    assert set(fields["secretRef"]["properties"]) == {"name", "key"}
    allow = spec["pushEgress"]["properties"]["allow"]
    assert allow["items"]["x-kubernetes-validations"][0]["rule"] == "isCIDR(self)"
    status = schema["properties"]["status"]["properties"]["groups"]["items"]["properties"]
    assert set(status["push"]["properties"]) == {"target", "secretRef"}
