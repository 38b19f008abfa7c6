"""DelaySchedules as the operator keeps them: the resource parsed into the schedule
API's own ``ScheduleSpec`` (``schedules``, checked by ``recurrence.spec``), the
calls a round makes and the status after it (``scheduleplan``), the client's
``Schedule`` read (``schedulekeeper.held_of``), and the CRD's schema against the
schedule API's bounds and cron grammar. Pure: the apiserver's refusals are
``tests/k8s/test_schedules.py``'s."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
import yaml

from delayq import Schedule
from delayq.argchecks import MAX_TOPIC_LEN
from delayq.recurrence import spec as api
from delayq.recurrence.cronexpr import MAX_CRON_LEN, parse_cron
from delayq.recurrence.spec import MAX_EVERY_MS, CatchUp, MessageTemplate, ScheduleSpec
from delayq_operator.schedulekeeper import held_of
from delayq_operator.scheduleplan import (
    Call,
    Held,
    failed_condition,
    plan,
    ready_condition,
    rfc3339,
    schedule_status,
)
from delayq_operator.schedules import DeclaredSchedule, crd_field, parse_schedule
from delayq_operator.spec import SpecError
from tests.k8s.support.kube import ROOT
from tests.k8s.support.kube import SCHEDULE_CRD as CRD

EXAMPLE = ROOT / "manifests/examples/delayschedule.yaml"


def resource(name: str = "nightly", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "prod", "generation": 3},
        "spec": {"topicRef": {"name": "orders"}, "topic": "reports", **spec},
    }


def test_a_full_spec_is_the_schedule_apis() -> None:
    declared = parse_schedule(
        resource(
            cron="0  2 * *  MON-FRI",
            timeZone="Europe/London",
            start="2026-03-01T00:00:00Z",
            end="2026-12-31T23:00:00+01:00",
            jitter="1500ms",
            catchUp={"policy": "all", "window": "2d"},
            message={"body": "héllo", "headers": {"team": "billing", "x-kind": "report"}},
            suspend=True,
        )
    )
    assert declared == DeclaredSchedule(
        name="nightly",
        topic_ref="orders",
        suspend=True,
        spec=ScheduleSpec(
            template=MessageTemplate(
                topic="reports",
                body="héllo".encode(),
                headers={"team": "billing", "x-kind": "report"},
            ),
            cron="0 2 * * MON-FRI",  # (spaces normalised, as the shards store it)
            time_zone="Europe/London",
            start_ms=1_772_323_200_000,
            end_ms=1_798_754_400_000,
            jitter_ms=1500,
            catch_up=CatchUp.ALL,
            catch_up_window_ms=2 * 86_400_000,
        ),
    )


def test_defaults_are_the_schedule_apis() -> None:
    declared = parse_schedule(resource(every="90s"))
    assert declared.spec == ScheduleSpec(template=MessageTemplate(topic="reports"), every_ms=90_000)
    assert declared.suspend is False
    assert ScheduleSpec(template=MessageTemplate(topic="t")).catch_up_window_ms == 3_600_000


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"cron": "61 * * * *"}, "spec.cron"),
        ({"cron": "* * * * * * *"}, "spec.cron"),
        ({"cron": "* * * * *", "every": "1s"}, "spec"),
        ({}, "spec"),
        ({"every": "0s"}, "spec.every"),
        ({"every": "1d"}, "spec.every"),
        ({"every": "999ms"}, "spec.every"),
        ({"every": "9000h"}, "spec.every"),
        ({"every": "30s", "jitter": "30s"}, "spec.jitter"),
        ({"every": "2h", "jitter": "61m"}, "spec.jitter"),
        ({"every": "30s", "timeZone": "Mars/Olympus_Mons"}, "spec.timeZone"),
        ({"every": "30s", "start": "tomorrow"}, "spec.start"),
        ({"every": "30s", "start": "2026-01-01T00:00:00"}, "spec.start"),
        (
            {"every": "30s", "start": "2026-01-02T00:00:00Z", "end": "2026-01-01T23:59:59Z"},
            "spec.end",
        ),
        ({"every": "30s", "catchUp": {"policy": "most"}}, "spec.catchUp.policy"),
        ({"every": "30s", "catchUp": {"window": "8d"}}, "spec.catchUp.window"),
        ({"every": "30s", "catchUp": {"window": "500ms"}}, "spec.catchUp.window"),
        (
            {"every": "30s", "message": {"headers": {"Delayq-Schedule": "x"}}},
            "spec.message.headers",
        ),
        ({"every": "30s", "message": {"body": "x" * ((64 << 10) + 1)}}, "spec.message.body"),
        ({"every": "30s", "message": {"headers": {"n": 1}}}, "spec.message.headers.n"),
        ({"every": "30s", "topic": "_schedules"}, "spec.topic"),
        ({"every": "30s", "topicRef": {}}, "spec.topicRef.name"),
        ({"every": "30s", "suspend": "yes"}, "spec.suspend"),
    ],
)
def test_a_bad_spec_names_the_crds_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_schedule(resource(**spec))
    assert e.value.field == field, e.value
    assert str(e.value).startswith(f"{field}: ")


def test_the_example_is_a_schedule_on_the_example_topic() -> None:
    declared = parse_schedule(yaml.safe_load(EXAMPLE.read_text()))
    assert (declared.name, declared.topic_ref, declared.spec.cron) == (
        "nightly-report",
        "orders",
        "0 2 * * MON-FRI",
    )
    assert declared.spec.template.headers == {"content-type": "application/json"}
    assert declared.spec.catch_up_window_ms == 6 * 3_600_000


def test_the_name_is_the_schedules() -> None:
    with pytest.raises(SpecError) as e:
        parse_schedule(resource("n" * 129, every="1m"))
    assert e.value.field == "metadata.name"
    assert parse_schedule(resource("n" * 128, every="1m")).name == "n" * 128


def test_api_fields_in_the_crds_words() -> None:
    assert crd_field("spec.every_ms") == "spec.every"
    assert crd_field("spec.catch_up_window_ms") == "spec.catchUp.window"
    assert crd_field("spec.template.headers.x-a") == "spec.message.headers.x-a"
    assert crd_field("spec.template.topic") == "spec.topic"
    assert crd_field("spec.cron") == "spec.cron"
    assert crd_field("spec.time_zone") == "spec.timeZone"
    assert crd_field("spec.every_msx") == "spec.every_msx"  # (a prefix is a whole field)


def _schema() -> dict[str, Any]:
    doc = yaml.safe_load(CRD.read_text())
    return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def test_the_crd_schema_has_the_schedule_apis_bounds() -> None:
    props = _schema()["properties"]
    assert props["topic"]["maxLength"] == MAX_TOPIC_LEN
    assert props["topic"]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9._-]*$"
    assert props["cron"]["maxLength"] == MAX_CRON_LEN
    message = props["message"]["properties"]
    assert message["headers"]["maxProperties"] == api.MAX_TEMPLATE_HEADERS
    assert message["body"]["maxLength"] == api.MAX_TEMPLATE_BODY_BYTES
    assert api.RESERVED_PREFIX in message["headers"]["x-kubernetes-validations"][0]["rule"]
    catch_up = props["catchUp"]["properties"]
    assert catch_up["policy"]["enum"] == [c.value for c in CatchUp]
    assert catch_up["policy"]["default"] == CatchUp.LATEST.value
    assert "7d" in catch_up["window"]["x-kubernetes-validations"][0]["message"]
    every_rules = " ".join(r["rule"] for r in props["every"]["x-kubernetes-validations"])
    assert f"<= {MAX_EVERY_MS // 3_600_000})" in every_rules  # (hours)
    assert f"<= {MAX_EVERY_MS})" in every_rules or f"<= {MAX_EVERY_MS // 1000}" in every_rules
    assert props["timeZone"]["default"] == ScheduleSpec(template=MessageTemplate("t")).time_zone


@pytest.mark.parametrize(
    "expr",
    [
        "* * * * *",
        "*/15 * * * *",
        "0 2 * * MON-FRI",
        "30 1 L * *",
        "0 9 * * MON#2",
        "0 0 1,15 * 5L",
        "0 12 29 FEB *",
        "*/10 * * * * *",
        "0 30 9 * JAN-MAR SUN",
    ],
)
def test_the_crds_cron_pattern_takes_what_the_schedule_api_takes(expr: str) -> None:
    pattern = re.compile(_schema()["properties"]["cron"]["pattern"])
    parse_cron(expr)  # (the schedule API takes it)
    assert pattern.search(expr)


@pytest.mark.parametrize("expr", ["@daily", "* * * *", "* * * * * * *", "* * * * *;"])
def test_the_crds_cron_pattern_refuses_what_is_not_5_or_6_fields(expr: str) -> None:
    pattern = re.compile(_schema()["properties"]["cron"]["pattern"])
    assert not pattern.search(expr)


SPEC = ScheduleSpec(template=MessageTemplate(topic="reports"), every_ms=60_000)


def declared(suspend: bool = False, spec: ScheduleSpec = SPEC) -> DeclaredSchedule:
    return DeclaredSchedule(name="s", topic_ref="orders", spec=spec, suspend=suspend)


def held(**kw: Any) -> Held:
    return Held(**{"spec": SPEC, "next_fire_ms": 1_800_000_000_000, "id": "m1", **kw})


def test_a_round_calls_what_differs_and_only_that() -> None:
    assert plan(declared(), None) == [Call.CREATE]
    assert plan(declared(suspend=True), None) == [Call.CREATE]  # made paused
    assert plan(declared(), held()) == []
    assert plan(declared(suspend=True), held(paused=True)) == []
    assert plan(declared(suspend=True), held()) == [Call.PAUSE]
    assert plan(declared(), held(paused=True)) == [Call.RESUME]
    other = replace(SPEC, every_ms=30_000)
    assert plan(declared(spec=other), held()) == [Call.UPDATE]
    assert plan(declared(spec=other), held(paused=True)) == [Call.UPDATE, Call.RESUME]
    assert plan(declared(spec=other, suspend=True), held()) == [Call.UPDATE, Call.PAUSE]
    # an ended schedule held as declared is left alone
    assert plan(declared(), held(ended=True, next_fire_ms=0)) == []


def test_times_as_kubernetes_writes_them() -> None:
    assert rfc3339(1_800_000_000_000) == "2027-01-15T08:00:00Z"
    assert rfc3339(1_800_000_000_250) == "2027-01-15T08:00:00.250Z"


def test_status_after_a_round() -> None:
    h = held(last_fire_ms=1_799_999_940_000, fired=7, missed=2)
    status = schedule_status(
        h, generation=3, ready=ready_condition(h), conditions=[], now="2027-01-15T07:59:30Z"
    )
    assert status == {
        "observedGeneration": 3,
        "scheduleId": "m1",
        "paused": False,
        "ended": False,
        "fired": 7,
        "missed": 2,
        "lastFireTime": "2027-01-15T07:59:00Z",
        "nextFireTime": "2027-01-15T08:00:00Z",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Scheduled",
                "message": "next firing at 2027-01-15T08:00:00Z",
                "lastTransitionTime": "2027-01-15T07:59:30Z",
            }
        ],
    }


def test_a_paused_or_ended_schedule_has_no_next_time_nor_a_new_one_a_last() -> None:
    for h, reason in ((held(paused=True), "Suspended"), (held(ended=True), "Ended")):
        status = schedule_status(h, generation=1, ready=ready_condition(h), conditions=[], now="t")
        assert status["nextFireTime"] is None  # (null: the merge patch removes it)
        assert status["lastFireTime"] is None
        assert status["conditions"][0]["reason"] == reason


def test_a_failed_round_leaves_the_held_fields_and_keeps_the_transition_time() -> None:
    before = [{"type": "Ready", "status": "False", "reason": "TopicNotServing",
               "message": "m", "lastTransitionTime": "t0"}]  # fmt: skip
    ready = failed_condition("Unavailable", "DelayTopic orders: UNAVAILABLE")
    status = schedule_status(None, generation=4, ready=ready, conditions=before, now="t1")
    assert set(status) == {"observedGeneration", "conditions"}
    [c] = status["conditions"]
    assert (c["reason"], c["lastTransitionTime"]) == ("Unavailable", "t0")
    ok = ready_condition(held())
    [c] = schedule_status(held(), generation=4, ready=ok, conditions=[c], now="t2")["conditions"]
    assert (c["status"], c["lastTransitionTime"]) == ("True", "t2")


def test_the_clients_schedule_as_the_plan_reads_it() -> None:
    s = Schedule(
        name="s",
        spec=SPEC,
        paused=True,
        ended=False,
        next_fire_ms=5,
        last_fire_ms=4,
        fired=3,
        missed=2,
        created_ms=1,
        updated_ms=1,
        id="m9",
    )
    assert held_of(s) == Held(
        spec=SPEC, paused=True, next_fire_ms=5, last_fire_ms=4, fired=3, missed=2, id="m9"
    )
