"""The shard map (pure): the one description of a topology, and who owns what.

One schema and one parser, shared by the server (``--shard-map FILE``), the
client (built from ``GetRoute``), the CLI, the local cluster and the operator
(its ConfigMap holds the same JSON). The file::

    {
      "topology_epoch": 3,               # >= 1; raised whenever the map changes
      "topic": "orders",                 # optional: the DelayTopic it belongs to
      "shards": [                        # index 0..N-1, each exactly once
        {"index": 0, "master": "10.0.0.5:7420", "replicas": [], "epoch": 1,
         "admin": "10.0.0.5:7422", "rocketmq": "10.0.0.5:7423"},
        ...
        {"index": 3, "master": "10.0.0.9:7420", "state": "joining"}
      ]
    }

``replicas`` (default empty), ``epoch`` (the shard's replication epoch, default
1), ``state`` (default ``active``) and ``admin`` (the master's admin address,
for the tools that call the admin service: rebalance and export jobs; default
unknown) and ``rocketmq`` (the master's RocketMQ 5 protocol address, the endpoint
RocketMQ clients are routed to for that shard; default: none) may be left
out. Unknown keys are refused, so a misspelt key is an error, not a silent
default. ``ShardMapError`` names the
offending path (``shards[1].master``).

Shard states, for a change of the shard count (a rebalance): the *active*
shards come first (indexes ``0..A-1``, at least one) and own every key; after
them either *joining* shards (a scale-up: they serve, take moved messages and
are fanned in from, but own no key until the rebalance makes them active) or
*leaving* shards (a scale-down: moved away from, drained, then dropped), never
both. ``owners`` is A; ``count`` counts every shard listed.

Ownership: a keyed message belongs to shard ``jump_hash(blake2b-64(key), A)``
(jump consistent hash: growing A by one moves 1/(A+1) of the keys); a message
without a key may go to any active shard; an id or receipt belongs to the shard
written inside it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from .addresses import admin_address, check_address

__all__ = [
    "ACTIVE",
    "JOINING",
    "LEAVING",
    "ShardEntry",
    "ShardMap",
    "ShardMapError",
    "jump_hash",
    "key_hash",
    "key_shards",
    "parse",
    "shard_of_key",
]

MAX_SHARDS = 1024
_MAP_KEYS = {"topology_epoch", "topic", "shards"}
_SHARD_KEYS = {"index", "master", "replicas", "epoch", "state", "admin", "rocketmq"}
ACTIVE, JOINING, LEAVING = "active", "joining", "leaving"
STATES = (ACTIVE, JOINING, LEAVING)


class ShardMapError(ValueError):
    """A shard map that cannot be used; the message names the offending path."""


@dataclass(frozen=True, kw_only=True)
class ShardEntry:
    index: int
    master: str
    """host:port clients dial for this shard's writes and deliveries."""
    replicas: tuple[str, ...] = ()
    epoch: int = 1
    """The shard's replication epoch (fencing token)."""
    state: str = ACTIVE
    """``active``, ``joining`` or ``leaving`` (see the module docstring)."""
    admin: str = ""
    """host:port of the master's admin service (not for clients); "": unknown."""
    rocketmq: str = ""
    """host:port of the master's RocketMQ 5 protocol port; "": none."""

    @property
    def active(self) -> bool:
        return self.state == ACTIVE

    def admin_address(self, env: Mapping[str, str]) -> str:
        """``admin``, else derived from ``env`` as ``addresses.admin_address`` does."""
        return self.admin or admin_address(self.master, env)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "master": self.master,
            "replicas": list(self.replicas),
            "epoch": self.epoch,
        }
        if self.state != ACTIVE:
            out["state"] = self.state
        if self.admin:
            out["admin"] = self.admin
        if self.rocketmq:
            out["rocketmq"] = self.rocketmq
        return out


@dataclass(frozen=True, kw_only=True)
class ShardMap:
    topology_epoch: int
    shards: tuple[ShardEntry, ...]
    topic: str = ""
    standalone: bool = field(default=False, compare=False)
    """True for the map a node without ``--shard-map`` makes of itself: it owns
    every key and id (the one-shard embedded default)."""

    def __post_init__(self) -> None:
        _check_map(self)

    @property
    def count(self) -> int:
        """Shards listed (active, joining or leaving): those fanned in from."""
        return len(self.shards)

    @property
    def owners(self) -> int:
        """Active shards (``0..owners-1``): those keys hash over."""
        return sum(1 for s in self.shards if s.active)

    @property
    def changing(self) -> str:
        """``joining`` or ``leaving`` while a shard-count change is under way, else ""."""
        return next((s.state for s in self.shards if not s.active), "")

    @classmethod
    def of_masters(
        cls, masters: Sequence[str], topology_epoch: int = 1, *, standalone: bool = False
    ) -> ShardMap:
        """The map of shards ``0..N-1`` served by ``masters``, with no replicas."""
        shards = tuple(ShardEntry(index=i, master=m) for i, m in enumerate(masters))
        return cls(topology_epoch=topology_epoch, shards=shards, standalone=standalone)

    @classmethod
    def single(cls, master: str, admin: str = "") -> ShardMap:
        """The one-shard map of a node that serves alone (its admin address too)."""
        entry = ShardEntry(index=0, master=master, admin=admin)
        return cls(topology_epoch=1, shards=(entry,), standalone=True)

    def masters(self) -> tuple[str, ...]:
        return tuple(s.master for s in self.shards)

    def shard_of_key(self, key: str) -> int:
        return shard_of_key(key, self.owners)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topology_epoch": self.topology_epoch,
            "shards": [s.to_json() for s in self.shards],
        }
        if self.topic:
            out["topic"] = self.topic
        return out

    def dumps(self) -> str:
        """The file form (stable key order, one trailing newline)."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def _int(value: Any, path: str, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ShardMapError(f"{path}: must be an integer in {lo}..{hi}, got {value!r}")
    return value


def _address(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ShardMapError(f"{path}: must be a host:port string, got {value!r}")
    try:
        check_address(path, value, lowest_port=1)
    except ValueError as exc:
        raise ShardMapError(str(exc)) from None
    return value


def _unknown(doc: dict[str, Any], known: set[str], path: str) -> None:
    extra = sorted(set(doc) - known)
    if extra:
        where = f"{path}: " if path else ""
        raise ShardMapError(f"{where}unknown key(s) {extra}; known: {sorted(known)}")


def _entry(doc: Any, path: str) -> ShardEntry:
    if not isinstance(doc, dict):
        raise ShardMapError(f"{path}: must be an object, got {type(doc).__name__}")
    _unknown(doc, _SHARD_KEYS, path)
    for key in ("index", "master"):
        if key not in doc:
            raise ShardMapError(f"{path}.{key}: missing")
    replicas = doc.get("replicas", [])
    if not isinstance(replicas, list):
        raise ShardMapError(f"{path}.replicas: must be a list of host:port")
    state = doc.get("state", ACTIVE)
    if state not in STATES:
        raise ShardMapError(f"{path}.state: must be one of {', '.join(STATES)}, got {state!r}")
    return ShardEntry(
        index=_int(doc["index"], f"{path}.index", 0, MAX_SHARDS - 1),
        master=_address(doc["master"], f"{path}.master"),
        replicas=tuple(_address(r, f"{path}.replicas[{i}]") for i, r in enumerate(replicas)),
        epoch=_int(doc.get("epoch", 1), f"{path}.epoch", 1, 2**31 - 1),
        state=state,
        admin=_address(doc["admin"], f"{path}.admin") if "admin" in doc else "",
        rocketmq=_address(doc["rocketmq"], f"{path}.rocketmq") if "rocketmq" in doc else "",
    )


def _check_map(m: ShardMap) -> None:
    if not m.shards:
        raise ShardMapError("shards: at least one shard")
    if len(m.shards) > MAX_SHARDS:
        raise ShardMapError(f"shards: at most {MAX_SHARDS}, got {len(m.shards)}")
    for i, s in enumerate(m.shards):
        if s.index != i:
            raise ShardMapError(
                f"shards[{i}].index: shards must be listed by index 0..{len(m.shards) - 1} "
                f"each once, got {s.index}"
            )
    _int(m.topology_epoch, "topology_epoch", 1, 2**63 - 1)
    owners = m.owners
    if owners == 0:
        raise ShardMapError("shards: at least one must be active")
    for i, s in enumerate(m.shards):
        if s.state not in STATES:
            raise ShardMapError(f"shards[{i}].state: must be one of {', '.join(STATES)}")
        if (i < owners) != s.active:
            raise ShardMapError(
                f"shards[{i}].state: active shards come first (0..{owners - 1}), then the "
                "joining or leaving ones"
            )
    if {s.state for s in m.shards} >= {JOINING, LEAVING}:
        raise ShardMapError("shards: joining and leaving shards at once; change one way at a time")


def parse(text: str | bytes) -> ShardMap:
    """A shard map from its JSON text; raises ``ShardMapError`` naming the bad path."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ShardMapError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ShardMapError(f"must be a JSON object, got {type(doc).__name__}")
    _unknown(doc, _MAP_KEYS, "")
    if "topology_epoch" not in doc:
        raise ShardMapError("topology_epoch: missing")
    shards = doc.get("shards")
    if not isinstance(shards, list):
        raise ShardMapError("shards: must be a list of shards")
    topic = doc.get("topic", "")
    if not isinstance(topic, str):
        raise ShardMapError(f"topic: must be a string, got {topic!r}")
    entries = [_entry(s, f"shards[{i}]") for i, s in enumerate(shards)]
    entries.sort(key=lambda e: e.index)
    return ShardMap(
        topology_epoch=_int(doc["topology_epoch"], "topology_epoch", 1, 2**63 - 1),
        shards=tuple(entries),
        topic=topic,
    )


def key_hash(key: str) -> int:
    """The 64-bit hash a key is placed by (blake2b: the same on every platform)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def jump_hash(key: int, buckets: int) -> int:
    """Jump consistent hash (Lamping & Veach): the shard of a 64-bit key; growing
    ``buckets`` by one moves only 1/(buckets+1) of the keys."""
    if buckets < 1:
        raise ValueError("buckets must be >= 1")
    b, j = -1, 0
    key &= (1 << 64) - 1
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & ((1 << 64) - 1)
        j = int((b + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return b


def shard_of_key(key: str, count: int) -> int:
    """The shard that owns ``key`` among ``count`` (a non-empty key)."""
    return 0 if count == 1 else jump_hash(key_hash(key), count)


def key_shards(keys: Sequence[str], count: int) -> np.ndarray:
    """``shard_of_key`` of many keys at once (int64; -1 for an empty key, which any
    shard may take): the jump-hash steps run on every key together."""
    import numpy as np  # here, not at import: a client that never routes by key never loads it

    out = np.full(len(keys), -1, dtype=np.int64)
    keyed = [i for i, k in enumerate(keys) if k]
    if not keyed:
        return out
    if count == 1:
        out[keyed] = 0
        return out
    state = np.array([key_hash(keys[i]) for i in keyed], dtype=np.uint64)
    b = np.full(len(keyed), -1, dtype=np.int64)
    j = np.zeros(len(keyed), dtype=np.int64)
    live = np.ones(len(keyed), dtype=bool)
    with np.errstate(over="ignore"):
        while live.any():
            b[live] = j[live]
            state[live] = state[live] * np.uint64(2862933555777941757) + np.uint64(1)
            step = (b[live] + 1) * ((1 << 31) / ((state[live] >> np.uint64(33)) + 1).astype(float))
            j[live] = step.astype(np.int64)
            live &= j < count
    out[keyed] = b
    return out
