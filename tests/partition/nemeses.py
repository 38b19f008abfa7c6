"""The faults the partition tests apply (Jepsen's nemeses), each to one shard of a
``Rig``: ``apply(rig, rng, shard)`` breaks something, ``rig.net.heal()`` mends it.
Partitions split the shard's *core* (the control plane and the shard's nodes);
the client keeps reaching every node throughout."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeAlias

from tests.partition.rig import Rig

__all__ = ["NEMESES", "Nemesis"]

Nemesis: TypeAlias = Callable[[Rig, random.Random, int], None]


def isolate_master(rig: Rig, rng: random.Random, shard: int) -> None:
    """The master cut off from the control plane and its replicas."""
    rig.net.isolate(rig.master(shard), rig.core(shard))


def bridge(rig: Rig, rng: random.Random, shard: int) -> None:
    """Only control plane <-> master; the replicas still reach both."""
    rig.net.cut("cp", rig.master(shard))


def master_replica(rig: Rig, rng: random.Random, shard: int) -> None:
    """Only master <-> one replica."""
    m = rig.master(shard)
    rig.net.cut(m, rng.choice([n for n in rig.shard_nodes(shard) if n != m]))


def master_to_cp_lost(rig: Rig, rng: random.Random, shard: int) -> None:
    rig.net.drop(rig.master(shard), "cp")


def cp_to_master_lost(rig: Rig, rng: random.Random, shard: int) -> None:
    rig.net.drop("cp", rig.master(shard))


def random_halves(rig: Rig, rng: random.Random, shard: int) -> None:
    members = rig.core(shard)
    rng.shuffle(members)
    half = len(members) // 2
    for a in members[:half]:
        for b in members[half:]:
            rig.net.cut(a, b)


def majorities_ring(rig: Rig, rng: random.Random, shard: int) -> None:
    """Each member sees a majority, no two the same one: with four, each loses
    only the one opposite it on a random ring."""
    ring = rig.core(shard)
    rng.shuffle(ring)
    for k in range(len(ring) // 2):
        rig.net.cut(ring[k], ring[k + len(ring) // 2])


def loss(rig: Rig, rng: random.Random, shard: int) -> None:
    """30 % of packets on every link between members."""
    rig.net.loss(30)


NEMESES: dict[str, Nemesis] = {
    "isolate-master": isolate_master,
    "bridge": bridge,
    "master-replica": master_replica,
    "one-way-master-to-cp": master_to_cp_lost,
    "one-way-cp-to-master": cp_to_master_lost,
    "random-halves": random_halves,
    "majorities-ring": majorities_ring,
    "loss-30": loss,
}
