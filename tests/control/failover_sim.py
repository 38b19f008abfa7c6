"""A simulation of a shard's nodes and its control plane under faults, for the
failover decision's tests (``delayq.control.failover``; ``test_failover_simulation.py``).

Each node's CommitLog is a list of record ids (a write appends fresh ids), so
"holds this record" is exact; ``flushed`` counts the ids fsynced. Replicas copy
their master's list after cutting theirs to the common prefix (the divergence
point). The control plane is the loop the supervisor runs: probe every node,
decide, record a promotion, then send the commands.

Messages from the control plane to a node take the node's ``delay``; one that
takes longer than the call's deadline has no answer and is handled when it
arrives (late, after later ones: reordered); one sent while the node is cut off
is held and handled at the heal. Leases follow ``replication.lease``: every
answer carries a token, grants hand back the latest one the control plane
received, and the node's lease runs from that answer's time. ``old_rule``
models the rule before it (the node renews from when it handles the probe, the
control plane counts from when it sent it), which the model must find unsafe.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from delayq.control.failover import (
    MASTER,
    REPLICA,
    Action,
    Fence,
    Follow,
    NodeStatus,
    Nothing,
    Promote,
    ShardView,
    Stuck,
    decide,
)
from delayq.replication.lease import LEASE_SHARE
from tests.control.failover_views import NAMES, cannot_deliver, healthy

SIM_LEASE = 1_000
SIM_PROBE_TIMEOUT = 400
SIM_COMMAND_TIMEOUT = 1_000
SIM_DELAYS = (300, 500, 1_500)
"""A slow link's added delay: 0.3, 0.5 and 1.5 leases."""


def common(a: list[int], b: list[int]) -> int:
    """The length of the common prefix of two logs."""
    k = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        k += 1
    return k


@dataclass
class SimNode:
    """The ground truth of one node process and its disk."""

    name: str
    up: bool = True
    cut: bool = False
    """Partitioned from the control plane and the other nodes (clients may still
    reach it: a master delivers while its lease lasts)."""
    role: str = REPLICA
    epoch: int = 1
    log: list[int] = field(default_factory=list)
    flushed: int = 0
    fenced: bool = False
    """Told to stop (or stopped itself), until a command of a higher epoch."""
    lease_until: int = -1
    """A master acks and delivers while now < lease_until (kept in memory only)."""
    following: str | None = None
    high_water: int = 0
    lose_answer: bool = False
    """The next probe reaches it but its answer is lost."""
    lose_command: bool = False
    delay: int = 0
    """How long a message from the control plane takes to reach it."""
    minted: dict[int, int] = field(default_factory=dict)
    """Its answers' lease tokens and when it gave each (``replication.lease``)."""
    held: list[tuple[Any, ...]] = field(default_factory=list)
    """Messages sent while it was cut off: handled when the cut heals."""

    def delivering(self, now: int) -> bool:
        return self.up and self.role == MASTER and not self.fenced and now < self.lease_until

    def reachable(self) -> bool:
        return self.up and not self.cut


@dataclass
class Sim:
    nodes: dict[str, SimNode]
    min_insync: int
    disaster: bool = False
    """A disk was lost, fsynced records were lost, or a master fenced itself
    (``wipe``, ``torn``, ``self_fence``; at most one a run)."""
    now: int = 0
    epoch: int = 1
    master: str = "a"
    insync: set[str] = field(default_factory=set)
    seen: dict[str, int] = field(default_factory=dict)
    last: dict[str, NodeStatus] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    took_office: dict[int, str] = field(default_factory=dict)
    next_id: int = 0
    committed: set[int] = field(default_factory=set)
    """Records a master could have delivered (at or below its high-water mark)."""
    seen_committed: set[int] = field(default_factory=set)
    """The same, as far as the control plane has seen (the marks masters reported)."""
    acked: set[int] = field(default_factory=set)
    """Records acknowledged in sync mode (fsynced on the master and min_insync - 1
    in-sync replicas)."""
    old_rule: bool = False
    tokens: dict[str, int] = field(default_factory=dict)
    """The token of each node's latest answer the control plane received."""
    late: list[tuple[int, int, str, tuple[Any, ...]]] = field(default_factory=list)
    """Messages in flight past their deadline: (arrival, order sent, node, message)."""

    @classmethod
    def start(cls, count: int, min_insync: int, *, old_rule: bool = False) -> Sim:
        nodes = {n: SimNode(n, following="a") for n in NAMES[:count]}
        a = nodes["a"]
        a.role, a.following, a.lease_until = MASTER, None, int(SIM_LEASE * LEASE_SHARE)
        sim = cls(nodes, min_insync, insync=set(nodes), took_office={1: "a"}, old_rule=old_rule)
        for n in nodes.values():
            sim.seen[n.name] = 0
            sim.tokens[n.name] = sim.mint(n, 0)
            sim.last[n.name] = sim.status(n, reachable=True)
        return sim

    def mint(self, n: SimNode, at: int) -> int:
        token = len(n.minted) + 1
        n.minted[token] = at
        return token

    def status(self, n: SimNode, *, reachable: bool) -> NodeStatus:
        is_master = n.role == MASTER
        return NodeStatus(
            name=n.name,
            reachable=reachable,
            seen_ms=self.seen[n.name],
            role=MASTER if is_master else REPLICA,
            epoch=n.epoch,
            log_end=len(n.log),
            flushed=n.flushed,
            fenced=n.fenced,
            insync=frozenset(self.insync) if is_master else frozenset(),
            high_water=n.high_water if is_master else 0,
        )

    # faults and load

    def event(self, kind: str, arg: int) -> None:
        """A fault or some load; ``arg`` picks the node (-1: the recorded master)."""
        n = self.nodes[self.master if arg < 0 else NAMES[arg % len(self.nodes)]]
        if kind == "crash":  # the page cache goes: unflushed records are lost
            n.up, n.lease_until = False, -1
            del n.log[n.flushed :]
        elif kind == "restart":
            n.up = True
        elif kind == "wipe":  # the disk is replaced: a fresh, empty node
            self.disaster = True
            n.up, n.role, n.epoch, n.log, n.flushed = True, REPLICA, 0, [], 0
            n.fenced, n.lease_until, n.following, n.high_water = False, -1, None, 0
        elif kind == "cut":
            n.cut = True
        elif kind == "heal":
            self.heal(n)
        elif kind == "slow":
            n.delay = SIM_DELAYS[abs(arg) % len(SIM_DELAYS)]
        elif kind == "fast":
            n.delay = 0
        elif kind == "lose_answer":
            n.lose_answer = True
        elif kind == "lose_command":
            n.lose_command = True
        elif kind == "flush":
            n.flushed = len(n.log)
        elif kind == "sync":  # replication runs, then the nodes in the bit mask fsync
            self.replicate()
            for i, m in enumerate(self.nodes.values()):
                if m.up and (arg < 0 or arg >> i & 1):
                    m.flushed = len(m.log)
        elif kind == "torn" and n.role == REPLICA:  # a lying disk
            self.disaster = True
            n.flushed = max(0, n.flushed - 2)
            del n.log[n.flushed :]
        elif kind == "self_fence" and n.role == MASTER:  # e.g. its disk refuses writes
            self.disaster = True
            n.fenced = True
        elif kind == "write":
            for m in self.nodes.values():
                if m.delivering(self.now):
                    m.log.extend(range(self.next_id, self.next_id + 1 + arg))
                    self.next_id += 1 + arg

    def heal(self, n: SimNode) -> None:
        """``n`` is reachable again; what was sent to it meanwhile arrives now."""
        n.cut = False
        for message in n.held:  # queued in TCP during the cut
            self.late.append((self.now, len(self.late), n.name, message))
        n.held.clear()

    def replicate(self) -> None:
        for n in self.nodes.values():
            m = self.nodes.get(n.following or "")
            if (
                m is not None
                and n.role == REPLICA
                and n.reachable()
                and m.reachable()
                and m.delivering(self.now)  # a master streams only while it holds its lease
                and m.epoch == n.epoch
            ):
                keep = common(n.log, m.log)  # the handshake: cut to the divergence point
                n.flushed = min(n.flushed, keep)
                n.log = list(m.log)
        m = self.nodes[self.master]
        if m.role != MASTER or m.epoch != self.epoch:
            return
        on = {s: common(m.log, self.nodes[s].log[: self.nodes[s].flushed]) for s in self.insync}
        m.high_water = max(m.high_water, min(on.values()))  # it never goes down
        self.committed.update(m.log[: m.high_water])
        others = sorted((p for s, p in on.items() if s != m.name), reverse=True)
        if m.delivering(self.now) and len(others) >= self.min_insync - 1 >= 1:
            # a sync ack: the master and min_insync - 1 in-sync replicas have fsynced it
            self.acked.update(m.log[: min(m.flushed, others[self.min_insync - 2])])

    # the control plane: probe, decide, record, act

    def probe(self) -> None:
        """Probe every node at once; the decision comes once every answer is in, or
        at the deadline."""
        sent, slowest = self.now, 0
        for n in self.nodes.values():
            answered = self.send(n, ("status", self.epoch, self.tokens[n.name]), SIM_PROBE_TIMEOUT)
            if n.lose_answer:
                answered, n.lose_answer = False, False
            if answered:
                slowest = max(slowest, n.delay)
                self.answered(n, sent)
                if n.role == MASTER:
                    self.seen_committed.update(n.log[: n.high_water])
            else:
                slowest = SIM_PROBE_TIMEOUT
                self.last[n.name] = dataclasses.replace(self.last[n.name], reachable=False)
        self.now += slowest

    def answered(self, n: SimNode, sent: int) -> None:
        """The control plane got ``n``'s answer to a message sent at ``sent``."""
        got = sent + n.delay
        self.seen[n.name] = sent if self.old_rule else got
        self.tokens[n.name] = self.mint(n, got)
        self.last[n.name] = self.status(n, reachable=True)

    def send(self, n: SimNode, message: tuple[Any, ...], timeout: int) -> bool:
        """Send ``message`` to ``n`` now: whether its answer comes within ``timeout``
        (it was then handled now); otherwise it is lost with the process, held
        while ``n`` is cut off, or handled when it arrives."""
        if not n.up:
            return False
        if n.cut:
            n.held.append(message)
            return False
        if n.delay > timeout:
            self.late.append((self.now + n.delay, len(self.late), n.name, message))
            return False
        return self.handle(n, message, self.now + n.delay)

    def deliver_late(self) -> None:
        """Messages whose time has come reach their nodes, in order of arrival."""
        due = sorted(m for m in self.late if m[0] <= self.now)
        self.late = [m for m in self.late if m[0] > self.now]
        for _, _, name, message in due:
            n = self.nodes[name]
            if n.up and n.cut:
                n.held.append(message)
            elif n.up:
                self.handle(n, message, self.now)

    def grant(self, n: SimNode, token: int, at: int) -> int:
        """The lease deadline a grant handled at ``at`` gives ``n``."""
        if self.old_rule:
            return at + int(SIM_LEASE * LEASE_SHARE)
        given = n.minted.get(token)
        return -1 if given is None else given + int(SIM_LEASE * LEASE_SHARE)

    def handle(self, n: SimNode, message: tuple[Any, ...], at: int) -> bool:
        """``n`` handles ``message`` at ``at`` (its clock); whether it took it."""
        match message:
            case ("status", epoch, token):
                if n.epoch == epoch and n.role == MASTER:
                    n.lease_until = max(n.lease_until, self.grant(n, token, at))
                return True
            case ("fence", epoch):
                if epoch >= n.epoch:
                    n.fenced = True
                    return True
            case ("promote", epoch, token):
                if epoch > n.epoch:
                    self.take_office(n, epoch)
                    n.lease_until = self.grant(n, token, at)
                    return True
            case ("follow", epoch, leader):
                if epoch >= n.epoch:
                    n.role, n.epoch, n.fenced, n.following = REPLICA, epoch, False, leader
                    n.lease_until, n.high_water = -1, 0
                    return True
        return False

    def view(self) -> ShardView:
        return ShardView(
            epoch=self.epoch,
            master=self.master,
            insync=frozenset(self.insync),
            nodes=tuple(self.last[n] for n in sorted(self.nodes)),
            now_ms=self.now,
            lease_ms=SIM_LEASE,
            min_insync=self.min_insync,
        )

    def command(self, n: SimNode, message: tuple[Any, ...]) -> bool:
        """Send a command; whether it was taken and answered in time."""
        lost = n.lose_command
        n.lose_command = False
        if lost:
            return False
        if self.send(n, message, SIM_COMMAND_TIMEOUT):
            self.answered(n, self.now)
            return True
        return False

    def act(self, action: Action) -> None:
        match action:
            case Fence(node=name, epoch=e):
                self.command(self.nodes[name], ("fence", e))
            case Promote(node=name, new_epoch=e, followers=followers):
                self.epoch, self.master, self.insync = e, name, set(action.insync)  # record first
                n = self.nodes[name]
                # the followers are told once it has taken office
                if self.command(n, ("promote", e, self.tokens[name])):
                    for follower, leader in followers:
                        self.act(Follow(follower, leader, e))
            case Follow(node=name, master=leader, epoch=e):
                self.command(self.nodes[name], ("follow", e, leader))
            case Nothing() | Stuck():
                pass

    def take_office(self, n: SimNode, epoch: int) -> None:
        assert self.took_office.setdefault(epoch, n.name) == n.name, "two masters, one epoch"
        held = set(n.log[: n.flushed])
        lacks = self.seen_committed - held
        # a Promote of an epoch the record has left behind (it arrived late) finds
        # its lease run out: it can never deliver, so what it holds does not matter
        late = epoch != self.epoch
        assert late or not lacks, f"{n.name} lacks committed {lacks}, reported by a master"
        # a lost disk or lost records: only what was reported counts
        if not late and not self.disaster:
            assert self.committed <= held, f"{n.name} lacks committed {self.committed - held}"
            assert self.acked <= held, f"{n.name} lacks acknowledged {self.acked - held}"
        n.role, n.epoch, n.fenced, n.following = MASTER, epoch, False, None
        del n.log[n.flushed :]  # (a new master serves only what it has fsynced)

    def drop_lost(self) -> None:
        """A member that answers with its disk lost (epoch 0) leaves the in-sync set."""
        for name in sorted(self.insync):
            if self.last[name].reachable and self.last[name].epoch == 0:
                self.insync.discard(name)

    def grow_insync(self) -> None:
        """A caught-up follower joins the in-sync set, through the control plane."""
        m = self.nodes[self.master]
        if not healthy(self.view()):
            return
        for n in self.nodes.values():
            if (
                n.reachable()
                and n.epoch == self.epoch
                and common(m.log, n.log[: n.flushed]) == len(m.log)
            ):
                self.insync.add(n.name)

    def step(self) -> Action:
        self.deliver_late()
        self.check_one_deliverer()
        self.probe()
        self.replicate()
        self.drop_lost()
        self.check_one_deliverer()
        v = self.view()
        action = decide(v)
        if isinstance(action, Promote):
            check_promotion(v, action)
            others = [n for n in self.nodes.values() if n.name != action.node]
            assert not any(n.delivering(self.now) for n in others), "promoted over a deliverer"
        self.actions.append(action)
        self.act(action)
        self.check_one_deliverer()
        self.grow_insync()
        return action

    def check_one_deliverer(self) -> None:
        delivering = [n.name for n in self.nodes.values() if n.delivering(self.now)]
        assert len(delivering) <= 1, f"two deliverers at {self.now}: {delivering}"
        for name in delivering:
            assert self.took_office.get(self.nodes[name].epoch) == name


def check_promotion(v: ShardView, p: Promote) -> None:
    """The old master is fenced or its lease has run out, and so is every other node
    that may have been a master; the new one comes from the in-sync set."""
    assert p.node in v.insync
    assert all(cannot_deliver(v, n) for n in v.nodes if n.name != p.node)
    old = v.status(v.master)
    assert old is not None
    if p.node != v.master:
        assert (old.reachable and (old.fenced or old.role == REPLICA)) or (
            not old.reachable
            and (v.now_ms - old.seen_ms > v.lease_ms or (old.fenced and old.epoch == v.epoch))
        )
