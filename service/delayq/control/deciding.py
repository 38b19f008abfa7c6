"""What a shard keeper does this round (pure: watches in, one choice out).

``choose`` wraps ``failover.decide`` with what the keeper knows beyond one view:

- a retiring master (its pod is being deleted or scaled away) still in office
  *hands over*: it is fenced once another in-sync member that stays answers and
  holds the high-water mark (``heirs``), and the decision then promotes one;
- a promotion of a retiring node is decided again without the retiring nodes
  (another eligible member, if any, rather than one going away);
- with nothing to do, a replica at the recorded epoch that follows no one (or
  another address) is told whom to follow (a pod restarted as a replica of no
  one: nothing stray for the decision, yet unattached).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from .failover import decide
from .failoveractions import Action, Fence, Follow, Nothing, Promote
from .failoverview import MASTER, NodeStatus, ShardView
from .membership import caught_up, in_office
from .record import ShardRecord
from .views import Answer, Watch

__all__ = ["Choice", "choose"]


@dataclass(frozen=True)
class Choice:
    action: Action
    heirs: tuple[str, ...] = ()
    """A hand-over: the members that may take over from the fenced master."""


def choose(
    rec: ShardRecord, view: ShardView, watches: Mapping[str, Watch], retiring: frozenset[str]
) -> Choice:
    master = watches[rec.master].answer
    heirs = _heirs(rec, master, watches, retiring)
    if heirs:
        return Choice(Fence(rec.master, rec.epoch), heirs)
    action = decide(view)
    if isinstance(action, Promote) and action.node in retiring:
        action = decide(_without(view, retiring - {rec.master}))
    if isinstance(action, Nothing) and in_office(master, rec.epoch):
        action = _unattached(rec, watches) or action
    return Choice(action)


def _heirs(
    rec: ShardRecord,
    master: Answer | None,
    watches: Mapping[str, Watch],
    retiring: frozenset[str],
) -> tuple[str, ...]:
    """When the recorded master (its answer: ``master``) is retiring and in office:
    the in-sync members that stay, answer and hold its high-water mark (empty: no
    hand-over now)."""
    if rec.master not in retiring or master is None or not in_office(master, rec.epoch):
        return ()
    return tuple(
        sorted(
            n
            for n in rec.insync
            if n not in retiring and n != rec.master and watches[n].up and caught_up(master, n)
        )
    )


def _unattached(rec: ShardRecord, watches: Mapping[str, Watch]) -> Follow | None:
    want = watches[rec.master].address
    for name in sorted(watches):
        a = watches[name].answer
        if (
            name != rec.master
            and a is not None
            and a.role != MASTER
            and not a.fenced
            and not a.recovering
            and a.epoch == rec.epoch
            and a.master != want
        ):
            return Follow(name, rec.master, rec.epoch)
    return None


def _without(view: ShardView, names: frozenset[str]) -> ShardView:
    """``view`` with ``names`` shown as holding nothing (no epoch): the decision
    then elects none of them."""
    nodes = tuple(
        NodeStatus(name=n.name, reachable=n.reachable, seen_ms=n.seen_ms)
        if n.name in names and n.role != MASTER
        else n
        for n in view.nodes
    )
    return dataclasses.replace(view, nodes=nodes)
