"""The failover decision (pure): what a shard's control plane does next.

A shard is one master and its replicas; only the master acks writes and delivers.
``decide(view)`` takes what the control plane knows of one shard (its recorded
metadata and the last probe of every node, with the time as a parameter) and
returns one ``Action``. The local cluster's supervisor and the operator both call
it, then carry the action out, probe again and call it again: one action a call,
so a lost command or a crash between calls is met by deciding afresh. There is
no I/O and no clock here; the same view always gives the same action.

The rules, each with its reason (``tests/control/test_failover_*.py`` checks each):

1. **Keep a live master.** The recorded master is *healthy* when it answers,
   reports role master, is not fenced, is at the recorded epoch, and no node
   reports an epoch above the recorded one. Then the answer is ``Nothing``, or
   ``Follow`` for one *stray* (lowest name first): another answering node that
   reports role master, reports itself fenced, or is at an epoch other than the
   recorded one. Reason: every failover costs an epoch, duplicate deliveries and
   seconds without delivery; a master that works is kept (RocketMQ's election
   keeps a live master too). A replica at the recorded epoch needs nothing: epochs
   are never reused, so that epoch names the recorded master.
2. **Fail over only a master that is gone or unfit.** Failover is due when the
   recorded master has not answered for longer than the lease
   (``now_ms - seen_ms > lease_ms``), or answers fenced, at an epoch below the
   recorded one, or as a replica. Reason: a missed probe is not death, and inside
   its lease an unreachable master may still be delivering (rule 3).
3. **Fence, then promote (two phases).** No ``Promote`` while any node other than
   the candidate might still deliver. A node that answers and reports itself an
   unfenced master is fenced first: ``Fence(node, epoch)``, the recorded master
   first, then the others by name; the promotion comes on a later call, once it
   reports fenced. A node that does not answer counts as stopped once its lease
   has run out (it self-fences by then: the caller's guarantee below), or when its
   last answer said replica or fenced; until then the answer is ``Nothing``
   (waiting). Except the recorded master: if its last answer was from an epoch
   below the recorded one, its ``Promote`` may have landed since, so only its
   lease counts. Reason: two deliverers at once mean duplicates and diverging
   logs (RocketMQ #7017); a node that cannot be told to stop is bounded only by
   its own lease (CloudNativePG fences before it promotes).
4. **Elect only from the recorded in-sync set.** Candidates are the members of the
   in-sync set recorded by the control plane that answer, other than the *old
   master*, that have an epoch (>= 1; a node without one is new or lost its disk)
   and have fsynced (``flushed``) at least the highest high-water mark that any
   node reporting role master reports. The best is the highest
   ``(epoch, flushed)``, ties to the lowest name. The old master is the recorded
   master, except when it answers as an unfenced replica at an epoch below the
   recorded one (but >= 1): then its promotion was recorded but never landed (the
   ``Promote`` was lost, or the caller died between recording and sending), and
   it is a candidate like the others. Reason: a member of the in-sync set holds
   every record up to the high-water mark (the only ones ever delivered), any
   other node may not; such records are never truncated, so every later master
   holds them too, and a member below a high-water mark has lost fsynced data
   (electing it would lose committed records everywhere: Kafka KIP-966); the
   master being replaced is the one that failed; and without the never-landed
   case a shard whose in-sync set is that one node would stay stuck for good.
   Last resort: when no other member is a candidate and no node reports an epoch
   above the recorded one, a recorded master that came back (it answers as an
   unfenced replica of the recorded epoch, an in-sync member: a restarted pod, as
   every pod starts as a replica) is promoted again at a new epoch. Every record of
   that epoch was written by it, and it holds all it fsynced: in sync mode every
   acknowledged write (fsynced on the master before its replicas are waited for);
   in async mode what it acknowledged unflushed may be gone, the documented cost of
   that mode. Without it a shard of one node (a DelayTopic's default) whose pod
   restarted would stay stuck for good.
5. **Epochs only rise.** The new epoch is the highest epoch known (recorded, or
   reported by any node, answering or not) plus one. Reason: the epoch is the
   fencing token; a node refuses commands of an epoch below its own, so a reused
   or lower epoch could let a stale master or a late command win.
6. **No unclean election.** No candidate gives ``Stuck`` with the reason (once
   the waits of rule 3 are over). So does sync mode (``min_insync >= 2``) when
   fewer than ``len(insync) - min_insync + 1`` members other than the old master
   answer intact (candidates by rule 4). Reason: promoting a node outside the
   in-sync set, or one that may lack an acknowledged write, loses data silently;
   that is an operator's audited override, never automatic (Kafka's
   ``unclean.leader.election.enable`` is off by default, RocketMQ's
   ``enableElectUncleanMaster`` too). A sync write is acknowledged once
   ``min_insync`` members (the master one of them) have fsynced it, so it
   survives on some answering member only when the others number fewer than
   ``min_insync`` (CloudNativePG's failover quorum); the best-ranked one then
   holds it. With ``min_insync == 1`` an acknowledged write may be on the master
   alone, which no election can keep: the failover goes ahead (the documented
   cost of async replication).
7. **Followers.** A ``Promote`` lists every other answering node, the old master
   included, to follow the new master; nodes that do not answer are told later,
   as strays (rule 1). Reason: a replica that keeps following a dead master falls
   behind, and an old master must truncate to the divergence point and follow
   before it may serve again.
8. **Deterministic.** The same view gives the same action, whatever the order of
   its nodes: every choice is ranked, ties by name. Reason: the supervisor and the
   operator, or one of them after a restart, must agree.

What the caller guarantees (the rules rely on it; nothing here can check it):

- **Record first.** Before sending a ``Promote`` the caller records the new
  metadata (epoch ``new_epoch``, master ``node``, in-sync set ``{node}``, as
  ``Promote.insync``) by compare-and-set, and sends nothing if the write fails.
  An epoch is then handed out only once, whatever happens to the command. The
  followers are told only once the new master has taken its ``Promote`` (until
  then the old master's last report, with its high-water mark, stays in view).
- **Leases.** A node last reached at ``seen_ms`` has stopped acking and
  delivering by ``seen_ms + lease_ms`` on the caller's clock, unless reached
  again since, whatever the delay of any message between them. The rule that
  gives it (``replication.lease`` on the node, ``control.views`` in the caller):
  every answer of a node carries a token, and the node notes its own clock when
  it gave it; a grant (a probe of the node's epoch, or a ``Promote``) hands back
  the token of the node's latest answer the caller received, and the node then
  holds its lease until that answer's time plus ``LEASE_SHARE`` of ``lease_ms``
  (a later grant never shortens it); ``seen_ms`` is when the caller received
  that answer. The answer was given before it was received, so the node's lease
  ends first for any transit time or stall, and a grant that arrives late (a
  slow link, a probe queued through a partition) grants a deadline already
  past. The margin, ``1 - LEASE_SHARE``, covers only clock rates. A master never
  granted a lease (started as master) does not lapse until its first grant
  bounds it, counted from that grant's arrival, which precedes its answer; the
  caller treats it as delivering until an answer says it is bounded. A master
  without a lease does not stream its log either, so an old master back from a
  crash (its unflushed tail gone) cannot make replicas cut records they have
  fsynced. Before it acknowledges a write (after the fsync and the in-sync
  wait) a master checks again that it still holds the lease of the epoch it
  admitted the write in.
- **Fences stick**: a fenced node stays fenced until a ``Promote`` or ``Follow``
  of a higher epoch, and every node refuses a command whose epoch is below its
  own (so a late command is harmless).
- **The in-sync set is the recorded one**: a sync write is acknowledged once the
  master itself and ``min_insync - 1`` members have fsynced it (so a master back
  from a crash has lost nothing it acknowledged), and the set changes only
  through the control plane's compare-and-set (an isolated master cannot shrink
  it to itself). A member joins only once it has fsynced the master's log
  (after truncating to the divergence point), and in sync mode a shrink must not
  leave an acknowledged write on fewer than ``min_insync`` members (Kafka
  sidesteps this by acking only when the whole set has a write).
- **A node that lost its disk says so**: it reports epoch 0 (its epoch history
  went with its data), never an epoch it no longer has the records of, and it
  leaves the in-sync set (under the shrink rule above) until it has caught up
  again. A master's high-water mark never goes down.

Here: the rules and ``decide``. The input types are in ``failoverview``
(``NodeStatus``, ``ShardView``), the actions and the history check in
``failoveractions``; all three are pure (an import contract), and this module
re-exports their names, the decision's API.
"""

from __future__ import annotations

from ..role import DEFAULT_LEASE_MS, LEASE_SHARE, Role
from .failoveractions import (
    Action,
    Fence,
    Follow,
    Nothing,
    Promote,
    Stuck,
    history_violations,
)
from .failoverview import MASTER, REPLICA, NodeStatus, ShardView

__all__ = [
    "DEFAULT_LEASE_MS",
    "LEASE_SHARE",
    "MASTER",
    "REPLICA",
    "Action",
    "Fence",
    "Follow",
    "NodeStatus",
    "Nothing",
    "Promote",
    "Role",
    "ShardView",
    "Stuck",
    "decide",
    "history_violations",
]


def decide(view: ShardView) -> Action:
    """The one next action for the shard in ``view`` (the rules: module notes)."""
    nodes = sorted(view.nodes, key=lambda n: n.name)
    master = _status(view, view.master)
    top = max([view.epoch, *(n.epoch for n in nodes)])
    if _healthy(view, master, top):
        for n in nodes:
            if n.name != master.name and n.reachable and _stray(view, n):
                return Follow(n.name, master.name, view.epoch)
        return Nothing(f"master {master.name} is healthy at epoch {view.epoch}")

    why = _why_unhealthy(view, master, top, nodes)
    old = None if _never_took_office(view, master) else master.name
    pick, why_none = _elect(view, nodes, old)
    if pick is None and top == view.epoch and _came_back(view, master, nodes):
        pick = master  # the last resort of rule 4: nobody wrote at a later epoch
    # the recorded master first, then the others by name; never the candidate
    ordered = [master, *(n for n in nodes if n.name != master.name)]
    others = [n for n in ordered if pick is None or n.name != pick.name]
    for n in others:
        if n.reachable and _might_deliver(view, n):
            return Fence(n.name, top)
    for n in others:
        if not n.reachable and _might_deliver(view, n):
            left = n.seen_ms + view.lease_ms + 1 - view.now_ms  # run out: > lease_ms
            return Nothing(f"{why}; waiting for {n.name} to stop: its lease runs out in {left} ms")
    if pick is None:
        return Stuck(f"{why}; {why_none}; an unclean election is never automatic")
    followers = tuple((n.name, pick.name) for n in nodes if n.reachable and n.name != pick.name)
    return Promote(pick.name, top + 1, followers)


def _status(view: ShardView, name: str) -> NodeStatus:
    found = view.status(name)
    assert found is not None  # ShardView checks the master has a status
    return found


def _lease_run_out(view: ShardView, n: NodeStatus) -> bool:
    return view.now_ms - n.seen_ms > view.lease_ms


def _healthy(view: ShardView, m: NodeStatus, top: int) -> bool:
    return (
        m.reachable
        and m.role == MASTER
        and not m.fenced
        and m.epoch == view.epoch
        and top == view.epoch
    )


def _stray(view: ShardView, n: NodeStatus) -> bool:
    return n.role == MASTER or n.fenced or n.epoch != view.epoch


def _never_took_office(view: ShardView, m: NodeStatus) -> bool:
    """The recorded master answers as a plain replica of an older epoch: its
    recorded promotion never reached it."""
    return m.reachable and m.role == REPLICA and not m.fenced and 1 <= m.epoch < view.epoch


def _came_back(view: ShardView, m: NodeStatus, nodes: list[NodeStatus]) -> bool:
    """The recorded master answers as an unfenced replica of the recorded epoch, an
    in-sync member with at least the high-water mark any master reports: it
    restarted (a pod starts as a replica). The caller checks that no node reports
    a later epoch."""
    return (
        m.reachable
        and m.role == REPLICA
        and not m.fenced
        and m.epoch == view.epoch
        and m.name in view.insync
        and m.flushed >= _high_water(nodes)
    )


def _high_water(nodes: list[NodeStatus]) -> int:
    """The highest high-water mark any node reporting role master reports."""
    return max((n.high_water for n in nodes if n.role == MASTER), default=0)


def _might_deliver(view: ShardView, n: NodeStatus) -> bool:
    """``n`` may be acking and delivering now, as far as the view can tell."""
    if n.reachable:
        return n.role == MASTER and not n.fenced
    if _lease_run_out(view, n):
        return False
    if n.name == view.master and n.epoch < view.epoch:
        return True  # its Promote may have landed after its last answer
    return n.role == MASTER and not n.fenced


def _why_unhealthy(view: ShardView, m: NodeStatus, top: int, nodes: list[NodeStatus]) -> str:
    if top > view.epoch:
        high = next(n for n in nodes if n.epoch == top)
        return (
            f"node {high.name} reports epoch {top}, above the recorded {view.epoch}: "
            "the record is behind"
        )
    if not m.reachable:
        return (
            f"master {m.name} has not answered for {view.now_ms - m.seen_ms} ms "
            f"(lease {view.lease_ms} ms)"
        )
    if m.fenced:
        return f"master {m.name} reports itself fenced"
    if m.epoch != view.epoch:
        return f"master {m.name} reports epoch {m.epoch}, not the recorded {view.epoch}"
    return f"master {m.name} reports role {m.role}"


def _elect(
    view: ShardView, nodes: list[NodeStatus], old: str | None
) -> tuple[NodeStatus | None, str]:
    """The best candidate (rules 4 and 6), or None and why there is none."""
    members = [n for n in nodes if n.name in view.insync and n.name != old]
    answering = [n for n in members if n.reachable]
    hw = _high_water(nodes)
    fit = [n for n in answering if n.epoch >= 1 and n.flushed >= hw]
    insync = sorted(view.insync)
    if not members:
        if not insync:
            return None, "the in-sync set is empty"
        return None, f"the in-sync set {insync} has no member but the old master"
    if not answering:
        return None, f"no member of the in-sync set {insync} but the old master answers"
    if not fit:
        lost = ", ".join(f"{n.name} epoch {n.epoch} flushed {n.flushed}" for n in answering)
        return None, (
            f"every answering in-sync member lost data (an epoch and the high-water "
            f"mark {hw} fsynced are needed): {lost}"
        )
    need = len(view.insync) - view.min_insync + 1
    if view.min_insync >= 2 and len(fit) < need:
        return None, (
            f"only {len(fit)} of the in-sync set {insync} answer intact besides the old "
            f"master; with min_insync {view.min_insync} an acknowledged write may be on "
            f"the others, so {need} must"
        )
    best = min(fit, key=lambda n: (-n.epoch, -n.flushed, n.name))
    return best, ""
