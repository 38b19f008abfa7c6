"""``spec.groups[]`` as the policies the operator sets (``groups``), what a
round sets and reports (``groupplan``) and the client's values of them
(``groupkeeper``): pure, against the server's own policy module
(``delayq.delivery.policy``) and settings, the client's types and the CRD's
schema."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import pytest
import yaml

from delayq.client import (
    BackoffKind,
    GroupInfo,
    GroupStats,
    Jitter,
    NodeStats,
    ShardStats,
    Stats,
    TopicStats,
)
from delayq.client import GroupPolicy as ClientPolicy
from delayq.delivery import policy as engine
from delayq.settings import AttemptLimits
from delayq_operator import groups
from delayq_operator.groupkeeper import from_client, observed, to_client
from delayq_operator.groupplan import Observed, group_status, managed_groups, plan
from delayq_operator.groups import DEFAULT_POLICY, Backoff, GroupSpec, Policy, parse_groups
from delayq_operator.spec import SpecError
from tests.k8s.support.kube import CRD


def body(*docs: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"groups": list(docs)}}


def as_engine(p: Policy) -> engine.GroupPolicy:
    """The server's value of the operator's: the same fields."""
    b = p.backoff
    return engine.GroupPolicy(
        max_attempts=p.max_attempts,
        backoff=engine.Backoff(
            kind=engine.BackoffKind(b.kind),
            initial_ms=b.initial_ms,
            multiplier=b.multiplier,
            max_ms=b.max_ms,
            jitter=engine.Jitter(b.jitter),
        ),
        rate_per_s=p.rate_per_s,
        burst=p.burst,
        max_in_flight=p.max_in_flight,
        paused=p.paused,
    )


def test_the_policy_has_the_engines_fields_and_bounds() -> None:
    assert set(asdict(Policy())) == {f for f in engine.GroupPolicy.__dataclass_fields__}
    assert set(asdict(Backoff())) == {f for f in engine.Backoff.__dataclass_fields__}
    assert tuple(k.value for k in engine.BackoffKind) == groups.KINDS
    assert tuple(j.value for j in engine.Jitter) == groups.JITTERS
    assert groups.MAX_ATTEMPTS == engine.MAX_ATTEMPTS
    assert groups.MAX_BACKOFF_MS == engine.MAX_BACKOFF_MS
    assert groups.MAX_MULTIPLIER == engine.MAX_MULTIPLIER
    assert groups.MAX_RATE_PER_S == engine.MAX_RATE_PER_S
    assert groups.MAX_IN_FLIGHT == engine.MAX_IN_FLIGHT
    assert AttemptLimits().default == groups.DEFAULT_MAX_ATTEMPTS


def test_the_crd_schema_has_the_same_bounds() -> None:
    doc = yaml.safe_load(CRD.read_text())
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    item = spec["properties"]["groups"]["items"]["properties"]
    assert item["maxAttempts"]["maximum"] == engine.MAX_ATTEMPTS
    assert item["rate"]["maximum"] == engine.MAX_RATE_PER_S
    assert item["burst"]["maximum"] == item["maxInFlight"]["maximum"] == engine.MAX_IN_FLIGHT
    assert item["name"]["maxLength"] == groups.MAX_GROUP_LEN
    backoff = item["backoff"]["properties"]
    assert backoff["multiplier"]["maximum"] == engine.MAX_MULTIPLIER
    assert backoff["kind"]["enum"] == list(groups.KINDS)
    assert backoff["jitter"]["enum"] == list(groups.JITTERS)
    assert engine.MAX_BACKOFF_MS == 12 * 3_600_000  # the CEL rules' 12h


def test_a_full_entry() -> None:
    (g,) = parse_groups(
        body(
            {
                "name": "billing",
                "maxAttempts": 5,
                "backoff": {
                    "kind": "exponential",
                    "initial": "500ms",
                    "multiplier": 3,
                    "max": "5m",
                    "jitter": "equal",
                },
                "rate": 200.5,
                "burst": 50,
                "maxInFlight": 1000,
                "paused": True,
            }
        )
    )
    assert g == GroupSpec(
        name="billing",
        policy=Policy(
            max_attempts=5,
            backoff=Backoff(
                kind="exponential", initial_ms=500, multiplier=3.0, max_ms=300_000, jitter="equal"
            ),
            rate_per_s=200.5,
            burst=50,
            max_in_flight=1000,
        ),
        pause=True,
    )
    assert g.desired(paused_now=False).paused is True


def test_defaults_are_the_servers() -> None:
    (g,) = parse_groups(body({"name": "plain"}))
    assert g.policy == DEFAULT_POLICY
    assert g.pause is None
    # the engine's defaults but max_attempts, which the server's settings give
    want = engine.GroupPolicy(max_attempts=AttemptLimits().default)
    assert as_engine(DEFAULT_POLICY) == want


@pytest.mark.parametrize(
    ("doc", "want"),
    [
        ({"backoff": {"initial": "30s"}}, Backoff(initial_ms=30_000, max_ms=30_000)),
        (
            {"backoff": {"kind": "exponential", "initial": "1s"}},
            Backoff(kind="exponential", initial_ms=1000, max_ms=engine.MAX_BACKOFF_MS),
        ),
        (
            {"backoff": {"initial": "2m", "max": "1h"}},
            Backoff(initial_ms=120_000, max_ms=3_600_000),
        ),
        ({"backoff": {"initial": "12h"}}, Backoff(initial_ms=43_200_000, max_ms=43_200_000)),
    ],
)
def test_backoff_defaults(doc: dict[str, Any], want: Backoff) -> None:
    (g,) = parse_groups(body({"name": "g", **doc}))
    assert g.policy.backoff == want


def test_unset_paused_follows_the_shards_and_a_set_one_is_enforced() -> None:
    free, held, freed = parse_groups(
        body({"name": "a"}, {"name": "b", "paused": True}, {"name": "c", "paused": False})
    )
    assert free.desired(paused_now=True).paused is True
    assert free.desired(paused_now=False).paused is False
    assert held.desired(paused_now=False).paused is True
    assert freed.desired(paused_now=True).paused is False


def test_a_rate_without_burst_gets_the_servers_burst() -> None:
    (g,) = parse_groups(body({"name": "g", "rate": 2.5}))
    assert g.policy.burst == 3


@pytest.mark.parametrize(
    "doc",
    [
        {"name": "g", "maxAttempts": 3},
        {"name": "g", "rate": 0.5},
        {"name": "g", "rate": 10, "burst": 1, "maxInFlight": 7},
        {"name": "g", "backoff": {"kind": "exponential", "initial": "1s", "max": "1m"}},
        {"name": "g", "backoff": {"kind": "fixed", "initial": "10s", "jitter": "full"}},
        {"name": "g", "backoff": {"initial": "0s", "multiplier": 100}},
    ],
)
def test_what_the_operator_sets_the_server_stores_as_it_is(doc: dict[str, Any]) -> None:
    """The server's ``check`` changes nothing of a desired policy: what a round reads
    back compares equal, so a converged group is never set again."""
    (g,) = parse_groups(body(doc))
    for paused in (False, True):
        want = as_engine(g.desired(paused))
        assert engine.check(want) == want


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"name": "no spaces"}, "spec.groups[0].name"),
        ({"name": "g" * 125}, "spec.groups[0].name"),
        ({"name": 7}, "spec.groups[0].name"),
        ({"name": "g", "rate": -1}, "spec.groups[0].rate"),
        ({"name": "g", "rate": float("inf")}, "spec.groups[0].rate"),
        ({"name": "g", "rate": 1_000_001}, "spec.groups[0].rate"),
        ({"name": "g", "maxAttempts": 1001}, "spec.groups[0].maxAttempts"),
        ({"name": "g", "maxAttempts": 2.5}, "spec.groups[0].maxAttempts"),
        ({"name": "g", "maxInFlight": True}, "spec.groups[0].maxInFlight"),
        ({"name": "g", "burst": -1}, "spec.groups[0].burst"),
        ({"name": "g", "backoff": {"initial": "10s", "max": "2s"}}, "spec.groups[0].backoff.max"),
        ({"name": "g", "backoff": {"initial": "13h"}}, "spec.groups[0].backoff.initial"),
        ({"name": "g", "backoff": {"initial": "1d"}}, "spec.groups[0].backoff.initial"),
        ({"name": "g", "backoff": {"max": 5}}, "spec.groups[0].backoff.max"),
        ({"name": "g", "backoff": {"multiplier": 0.5}}, "spec.groups[0].backoff.multiplier"),
        ({"name": "g", "backoff": {"kind": "linear"}}, "spec.groups[0].backoff.kind"),
        ({"name": "g", "backoff": {"jitter": "some"}}, "spec.groups[0].backoff.jitter"),
        ({"name": "g", "backoff": "fast"}, "spec.groups[0].backoff"),
        ({"name": "g", "paused": "yes"}, "spec.groups[0].paused"),
    ],
)
def test_a_bad_entry_names_its_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_groups(body(doc))
    assert e.value.field == field


def test_a_group_declared_twice_is_refused() -> None:
    with pytest.raises(SpecError) as e:
        parse_groups(body({"name": "g"}, {"name": "h"}, {"name": "g"}))
    assert e.value.field == "spec.groups[2].name"


def test_no_groups() -> None:
    assert parse_groups({"spec": {}}) == ()
    assert parse_groups({}) == ()


def seen(g: GroupSpec, paused: bool = False, **kw: Any) -> Observed:
    return Observed(name=g.name, policy=g.desired(paused), **kw)


def test_a_round_sets_what_differs_and_only_that() -> None:
    a, b, c, d = parse_groups(
        body(
            {"name": "a", "maxAttempts": 3},
            {"name": "b", "rate": 5},
            {"name": "c"},
            {"name": "d", "paused": True},
        )
    )
    observed = {
        "a": seen(a),  # as declared
        "b": Observed(name="b", policy=replace(b.policy, rate_per_s=9.0)),  # drifted
        # c: unknown to the shards; d: the shards disagree
        "d": Observed(name="d", policy=None),
    }
    assert plan([a, b, c, d], set(), observed) == [
        ("b", b.policy),
        ("c", c.policy),
        ("d", replace(d.policy, paused=True)),
    ]
    # the server's defaults are not an explicit policy: set (its record made)
    assert plan([c], set(), {"c": Observed(name="c", policy=c.policy, explicit=False)}) == [
        ("c", c.policy)
    ]


def test_a_pause_made_by_hand_stays_when_the_spec_says_nothing() -> None:
    (a,) = parse_groups(body({"name": "a", "maxAttempts": 3}))
    assert plan([a], set(), {"a": seen(a, paused=True)}) == []
    (held,) = parse_groups(body({"name": "a", "maxAttempts": 3, "paused": False}))
    assert plan([held], set(), {"a": seen(a, paused=True)}) == [("a", held.policy)]


def test_a_group_paused_on_one_shard_of_disagreeing_ones_stays_paused() -> None:
    """The shards disagree (a pause half done, a shard that missed a set): the
    policy is unknown, the paused shard's stats tell; only ``paused: false`` resumes."""
    (a,) = parse_groups(body({"name": "a", "maxAttempts": 3}))
    held = to_client(a.policy)
    info = GroupInfo("orders", "a", held, True, (0, 1), (1,))
    stats = Stats(
        topics=(),
        lateness_ms_p50=0,
        lateness_ms_p99=0,
        release_lag_ms=0,
        shards=(shard_stats(0, "a", held), shard_stats(1, "a", replace(held, paused=True))),
    )
    got = observed("orders", [info], 2, stats)
    assert got["a"].policy is None and got["a"].paused
    assert plan([a], set(), got) == [("a", replace(a.policy, paused=True))]
    (freed,) = parse_groups(body({"name": "a", "maxAttempts": 3, "paused": False}))
    assert plan([freed], set(), got) == [("a", freed.policy)]


def shard_stats(shard: int, group: str, policy: ClientPolicy) -> ShardStats:
    g = GroupStats(
        group=group,
        policy=policy,
        explicit=True,
        paused=policy.paused,
        in_flight=0,
        in_flight_limit=0,
        waiting=0,
        attempts={},
        next_retry_at_ms=0,
        throttled=0,
        retries=0,
    )
    topic = TopicStats("orders", 0, 0, 0, {}, (), groups=(g,))
    return ShardStats((topic,), 0, 0, 0, NodeStats(shard, 1, "master", 0, 1, "127.0.0.1:1"))


def test_a_group_removed_from_the_spec_goes_back_to_the_defaults() -> None:
    (a,) = parse_groups(body({"name": "a"}))
    gone = Observed(name="gone", policy=Policy(max_attempts=2, paused=True))
    observed = {"a": seen(a), "gone": gone, "reset": Observed(name="reset", policy=DEFAULT_POLICY)}
    managed = {"a", "gone", "reset", "unknown"}
    assert plan([a], managed, observed) == [("gone", DEFAULT_POLICY)]
    # groups the operator never declared are not its own: left as they are
    assert plan([a], {"a"}, observed) == []


def test_status_after_a_round() -> None:
    a, b, c = parse_groups(body({"name": "a"}, {"name": "b", "paused": True}, {"name": "c"}))
    observed = {"a": seen(a, in_flight=7), "b": seen(b, paused=False, in_flight=2)}
    sets = [("b", b.desired(False)), ("c", c.policy), ("gone", DEFAULT_POLICY)]
    failures = {"c": "shard 1: UNAVAILABLE", "gone": "shard 0: UNAVAILABLE"}
    entries = group_status([a, b, c], observed, sets, failures)
    assert entries == [
        {"name": "a", "applied": True, "paused": False, "inFlight": 7},
        {"name": "b", "applied": True, "paused": True, "inFlight": 2},
        {
            "name": "c",
            "applied": False,
            "paused": False,
            "inFlight": 0,
            "message": "shard 1: UNAVAILABLE",
        },
        {
            "name": "gone",
            "applied": False,
            "message": "going back to the defaults: shard 0: UNAVAILABLE",
        },
    ]
    # what the next round manages: the declared ones and the reset that failed
    assert managed_groups({"groups": entries}) == {"a", "b", "c", "gone"}
    assert managed_groups(None) == frozenset()


def test_the_clients_policy_is_the_operators_both_ways() -> None:
    (g,) = parse_groups(
        body(
            {
                "name": "g",
                "maxAttempts": 0,
                "backoff": {"kind": "exponential", "initial": "1s", "jitter": "full"},
                "rate": 3.5,
                "maxInFlight": 9,
                "paused": True,
            }
        )
    )
    want = g.desired(False)
    got = to_client(want)
    assert got.backoff.kind is BackoffKind.EXPONENTIAL and got.backoff.jitter is Jitter.FULL
    assert (got.rate_per_s, got.burst, got.max_in_flight, got.paused) == (3.5, 4, 9, True)
    assert from_client(got) == want
    assert from_client(ClientPolicy()) == DEFAULT_POLICY  # None: the server's default
    assert from_client(ClientPolicy(max_attempts=0)) == replace(DEFAULT_POLICY, max_attempts=0)


def test_observed_groups_of_the_topic_with_their_in_flight() -> None:
    (g,) = parse_groups(body({"name": "a", "maxAttempts": 3}))
    held = to_client(g.policy)
    infos = [
        GroupInfo("orders", "a", held, True, (0, 1)),
        GroupInfo("orders", "half", held, True, (0,)),  # a shard added since
        GroupInfo("orders", "split", held, True, (0, 1), (1,)),
        GroupInfo("orders", "used", ClientPolicy(), False, (0, 1)),
        GroupInfo("other", "a", held, True, (0, 1)),
    ]
    got = observed("orders", infos, 2, None)
    assert got["a"] == Observed(name="a", policy=g.policy)
    assert got["half"].policy is None and got["split"].policy is None
    assert not got["used"].explicit
    assert set(got) == {"a", "half", "split", "used"}
    assert plan([g], set(), got) == []


def test_a_policy_in_a_line() -> None:
    (g,) = parse_groups(
        body({"name": "g", "backoff": {"kind": "exponential", "initial": "1s"}, "rate": 2.5})
    )
    assert groups.describe(g.policy) == (
        "maxAttempts 16, backoff exponential 1000ms x2 max 43200000ms jitter none, "
        "rate 2.5/s burst 3, maxInFlight 0, paused false"
    )
