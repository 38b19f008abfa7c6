"""The shard map schema (``delayq.shardmap``): parse, refuse with a named path,
round-trip, and the key -> shard rule (scalar and batch forms agree)."""

from __future__ import annotations

import json
import random

import pytest

from delayq import shardmap
from delayq.shardmap import ShardEntry, ShardMap, ShardMapError

GOOD = {
    "topology_epoch": 4,
    "topic": "orders",
    "shards": [
        {"index": 1, "master": "10.0.0.2:7420", "replicas": ["10.0.0.3:7420"], "epoch": 2},
        {"index": 0, "master": "node-0.svc:7420"},
    ],
}


def test_parse_fills_defaults_and_orders_by_index() -> None:
    m = shardmap.parse(json.dumps(GOOD))
    assert m.topology_epoch == 4 and m.topic == "orders" and m.count == 2
    assert m.shards[0] == ShardEntry(index=0, master="node-0.svc:7420")
    assert m.shards[1].replicas == ("10.0.0.3:7420",) and m.shards[1].epoch == 2
    assert m.masters() == ("node-0.svc:7420", "10.0.0.2:7420")
    assert shardmap.parse(m.dumps()) == m  # the file form round-trips


@pytest.mark.parametrize(
    ("doc", "names"),
    [
        ("not json", "not JSON"),
        ("[]", "JSON object"),
        ({"shards": []}, "topology_epoch: missing"),
        ({**GOOD, "topology_epoch": 0}, "topology_epoch: must be an integer"),
        ({**GOOD, "topology_epoch": True}, "topology_epoch: must be an integer"),
        ({**GOOD, "shards": []}, "shards: at least one"),
        ({**GOOD, "shards": "a:1"}, "shards: must be a list"),
        ({**GOOD, "shard": []}, "unknown key(s) ['shard']"),
        ({**GOOD, "topic": 3}, "topic: must be a string"),
        ({"topology_epoch": 1, "shards": [{"index": 0}]}, "shards[0].master: missing"),
        ({"topology_epoch": 1, "shards": [{"master": "a:1"}]}, "shards[0].index: missing"),
        ({"topology_epoch": 1, "shards": [{"index": 0, "master": "a"}]}, "shards[0].master"),
        ({"topology_epoch": 1, "shards": [{"index": 0, "master": "a:0"}]}, "shards[0].master"),
        ({"topology_epoch": 1, "shards": [{"index": 0, "master": 7}]}, "shards[0].master"),
        (
            {"topology_epoch": 1, "shards": [{"index": 0, "master": "a:1", "replicas": ["b"]}]},
            "shards[0].replicas[0]",
        ),
        (
            {"topology_epoch": 1, "shards": [{"index": 0, "master": "a:1", "epoch": 0}]},
            "shards[0].epoch",
        ),
        (
            {"topology_epoch": 1, "shards": [{"index": 0, "master": "a:1", "role": "x"}]},
            "shards[0]: unknown key(s) ['role']",
        ),
        ({"topology_epoch": 1, "shards": [{"index": 1, "master": "a:1"}]}, "shards[0].index"),
        (
            {"topology_epoch": 1, "shards": [{"index": 0, "master": "a:1"}] * 2},
            "shards[1].index",
        ),
    ],
)
def test_bad_maps_are_refused_naming_the_path(doc: object, names: str) -> None:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(ShardMapError) as err:
        shardmap.parse(text)
    assert names in str(err.value)


def test_single_is_a_standalone_one_shard_map() -> None:
    m = ShardMap.single("127.0.0.1:7420")
    assert m.standalone and m.count == 1 and m.masters() == ("127.0.0.1:7420",)
    assert not shardmap.parse(m.dumps()).standalone  # a file is never standalone


def test_keys_place_by_jump_hash_in_both_forms() -> None:
    rng = random.Random(7)
    keys = [f"k{rng.random()}" for _ in range(3000)] + [""]
    for count in (1, 2, 3, 4, 7, 100):
        batch = shardmap.key_shards(keys, count).tolist()
        assert batch[-1] == -1  # no key: any shard
        assert batch[:-1] == [shardmap.shard_of_key(k, count) for k in keys[:-1]]
        assert all(0 <= s < count for s in batch[:-1])
    three = shardmap.key_shards(keys[:-1], 3).tolist()
    assert all(abs(three.count(s) - 1000) < 150 for s in range(3))  # even
    # growing 3 -> 4 moves about a quarter of the keys, only to the new shard
    four = shardmap.key_shards(keys[:-1], 4).tolist()
    moved = [(a, b) for a, b in zip(three, four, strict=True) if a != b]
    assert all(b == 3 for _, b in moved) and 600 < len(moved) < 900


def test_placement_is_pinned() -> None:
    """Clients and servers of different versions must agree where a key lives:
    these values are pinned; a change to them moves keys between shards."""
    assert [shardmap.jump_hash(k, 1000) for k in (0, 1, 0xDEADBEEF)] == [0, 549, 285]
    assert [shardmap.shard_of_key(k, 8) for k in ("a", "order-17", "ü")] == [3, 1, 7]
    assert shardmap.key_hash("order-17") == 0xB05B448E0CAEE978
    with pytest.raises(ValueError):
        shardmap.jump_hash(1, 0)


def test_joining_and_leaving_shards_follow_the_active_ones() -> None:
    doc = {
        "topology_epoch": 2,
        "shards": [
            {"index": 0, "master": "a:1"},
            {"index": 1, "master": "b:1"},
            {"index": 2, "master": "c:1", "state": "joining"},
        ],
    }
    m = shardmap.parse(json.dumps(doc))
    assert (m.count, m.owners, m.changing) == (3, 2, "joining")
    assert shardmap.parse(m.dumps()) == m
    assert "state" not in m.to_json()["shards"][0], "active is the default, left out"
    bad = [
        ({"state": "gone"}, 2, "shards[2].state: must be one of active, joining, leaving"),
        ({"state": "leaving"}, 0, "shards[0].state: active shards come first"),
    ]
    for change, at, message in bad:
        d = json.loads(json.dumps(doc))
        d["shards"][at].update(change)
        with pytest.raises(ShardMapError) as err:
            shardmap.parse(json.dumps(d))
        assert message in str(err.value)
    both = json.loads(json.dumps(doc))
    both["shards"].append({"index": 3, "master": "d:1", "state": "leaving"})
    with pytest.raises(ShardMapError, match="joining and leaving shards at once"):
        shardmap.parse(json.dumps(both))
    none = {"topology_epoch": 1, "shards": [{"index": 0, "master": "a:1", "state": "leaving"}]}
    with pytest.raises(ShardMapError, match="at least one must be active"):
        shardmap.parse(json.dumps(none))


def test_a_masters_admin_address_is_kept_or_derived() -> None:
    doc = {"topology_epoch": 1, "shards": [{"index": 0, "master": "a:7420", "admin": "a:7422"}]}
    m = shardmap.parse(json.dumps(doc))
    assert m.shards[0].admin == "a:7422" and shardmap.parse(m.dumps()) == m
    assert m.shards[0].admin_address({"DELAYQ_ADMIN_PORT": "9"}) == "a:7422", "the map's first"
    bare = ShardEntry(index=0, master="b:7420")
    assert "admin" not in bare.to_json()
    assert bare.admin_address({}) == "b:7420"
    assert bare.admin_address({"DELAYQ_ADMIN_PORT": "7422"}) == "b:7422"
    assert bare.admin_address({"DELAYQ_ADMIN_ADDRESSES": '{"b:7420": "c:1"}'}) == "c:1"
    with pytest.raises(ShardMapError, match=r"shards\[0\].admin"):
        shardmap.parse(
            json.dumps({"topology_epoch": 1, "shards": [{**doc["shards"][0], "admin": "x"}]})
        )  # type: ignore[dict-item]
    assert ShardMap.single("127.0.0.1:7420", "127.0.0.1:7422").shards[0].admin == "127.0.0.1:7422"
