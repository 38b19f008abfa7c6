"""The failover decision's output (pure): the one ``Action`` ``failover.decide``
returns, ``Nothing``, ``Fence`` (phase 1), ``Promote`` (phase 2), ``Follow`` (a
stray) or ``Stuck``, and ``history_violations``, the safety invariants a
sequence of decided actions must keep (what the simulation in
``tests/control/test_failover_simulation.py`` checks every run against).

Invariants of a history (``history_violations`` names each break): epochs
strictly increase with each ``Promote`` and are never reused; no epoch names two
masters; nobody follows itself; a ``Promote``'s followers follow the promoted
node. What the caller does with an action (record a ``Promote`` before sending
it): ``failover``'s module notes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["Action", "Fence", "Follow", "Nothing", "Promote", "Stuck", "history_violations"]


@dataclass(frozen=True)
class Nothing:
    """Nothing to do now (the master is healthy, or a lease is still running)."""

    reason: str


@dataclass(frozen=True)
class Fence:
    """Phase 1: tell ``node`` to stop acking and delivering, now.

    ``epoch`` is the highest epoch known, so the node (at that epoch or below)
    cannot refuse it as stale, and a later epoch's master refuses it if it
    arrives late."""

    node: str
    epoch: int


@dataclass(frozen=True)
class Promote:
    """Phase 2: make ``node`` the master in ``new_epoch``; once it has taken that,
    tell each ``(follower, master)`` pair's follower to follow ``master`` (the new
    master) in ``new_epoch``. Record it before sending it (see ``failover``'s notes)."""

    node: str
    new_epoch: int
    followers: tuple[tuple[str, str], ...]

    @property
    def insync(self) -> frozenset[str]:
        """The in-sync set to record with the promotion: the new master alone. The
        others rejoin through the control plane once they have caught up."""
        return frozenset({self.node})


@dataclass(frozen=True)
class Follow:
    """Tell the stray ``node`` to follow ``master`` in ``epoch`` (the recorded one):
    it stops acting as a master, truncates to the divergence point and follows."""

    node: str
    master: str
    epoch: int


@dataclass(frozen=True)
class Stuck:
    """Failover is due but no node may be promoted automatically; ``reason`` says
    why. An unclean election is an operator's decision, never this function's."""

    reason: str


Action: TypeAlias = Nothing | Fence | Promote | Follow | Stuck


def history_violations(
    actions: Iterable[Action], *, epoch: int = 0, master: str | None = None
) -> tuple[str, ...]:
    """The safety invariants a sequence of decided actions breaks (empty: none).

    ``epoch`` and ``master`` describe the shard before the first action. Checked:
    every ``Promote`` takes an epoch above every epoch named before it (epochs
    strictly increase, none is reused); no epoch ever names two masters (through
    ``Promote``, ``Follow`` or ``Promote``'s followers); nobody follows itself and
    the followers of a ``Promote`` follow the promoted node."""
    out: list[str] = []
    masters: dict[int, str] = {}
    if master is not None:
        masters[epoch] = master
    top = epoch

    def claim(i: int, e: int, name: str) -> None:
        holder = masters.setdefault(e, name)
        if holder != name:
            out.append(f"#{i}: epoch {e} has two masters, {holder} and {name}")

    for i, action in enumerate(actions):
        match action:
            case Promote(node=node, new_epoch=new, followers=followers):
                if new <= top:
                    out.append(f"#{i}: Promote({node}) to epoch {new}, not above {top}")
                claim(i, new, node)
                for follower, leader in followers:
                    if leader != node or follower == node:
                        out.append(f"#{i}: Promote({node}) tells {follower} to follow {leader}")
                top = max(top, new)
            case Follow(node=node, master=leader, epoch=e):
                if node == leader:
                    out.append(f"#{i}: {node} told to follow itself")
                claim(i, e, leader)
                top = max(top, e)
            case Fence(epoch=e):
                top = max(top, e)
            case Nothing() | Stuck():
                pass
    return tuple(out)
