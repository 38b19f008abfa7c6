"""The failover loop of one shard (``ShardKeeper``): probe, decide, act, again.

Every probe interval (250 ms) the keeper sends admin ``Status`` to every node of
its shard at once (deadline 400 ms), remembers the answers (``views.Watch``),
builds the ``failover.ShardView`` and carries out the one action
``failover.decide`` returns; then it keeps the recorded in-sync set current
(``membership``). Each shard has its own thread, so a shard whose nodes are slow to
answer never delays another's.

The round's jobs live beside it: ``probing`` (the ``Status`` round and what is
known of each node), ``deciding`` (the action: ``failover.decide`` plus the
hand-over and the unattached replica), ``acting`` (the admin commands, the record
written first), ``upkeep`` (the in-sync set) and ``ledger`` (the record, the
shard map, events and logs). A ``Promote`` that did not land is met on a later
tick: the recorded master then answers as a replica of an older epoch, and the
decision promotes it again, higher.

A shard whose record was never in office (``founding``: the operator starts
every pod as a replica) gets its first master from ``founding.founding``, not
from the decision, promoted the same way (recorded first when it differs).

Nodes about to go away (``retire``: a pod being deleted, or scaled away) leave
the shard in order: a retiring member leaves the in-sync set as soon as that is
safe (``membership.leaver``) and never joins it again; a retiring master still in
office *hands over*: once another in-sync member that is not retiring answers
and holds the high-water mark, the master is fenced, and the decision promotes
the best such member (a retiring node is never elected while another is
eligible). The operator scales a StatefulSet down only after that.

``on_event(reason, message)``, when given, hears the story a user reads in
``kubectl describe``: ``MasterLost`` (once an epoch, as the failover begins),
``HandOver`` (a retiring master fenced on purpose), ``Fenced``, ``Promoted``,
``FailoverStuck`` (once a reason) and ``InSyncChanged``.

The keeper's lock is held for a whole tick. The supervisor takes it (without
waiting; it tries again on its next poll) to choose how a dead node starts
again (``start_target``): the recorded master that has taken office starts as
master, every other node with ``--follow`` the recorded master's address. So a
promotion is never recorded between that choice and the view that must count
the new process (``views``: a node started as master is waited for until it
answers).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..role import DEFAULT_LEASE_MS, LEASE_SHARE
from .acting import Actor
from .admin import Admin
from .deciding import choose
from .failoveractions import Action, Follow, Nothing, Promote
from .failoverview import MASTER
from .founding import Found, founding, unfounded
from .ledger import Ledger, log
from .membership import in_office
from .probing import Probes
from .record import ShardRecord
from .upkeep import keep_insync
from .views import Answer, Watch, shard_view

__all__ = ["KeeperSettings", "ShardKeeper", "monotonic_ms"]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, kw_only=True)
class KeeperSettings:
    probe_interval_ms: int = 250
    probe_timeout_ms: int = 400
    command_timeout_ms: int = 1000
    lease_ms: int = DEFAULT_LEASE_MS
    min_insync: int = 1
    """``ShardView.min_insync``: ``--min-insync`` in sync mode, 1 in async."""
    sync: bool = False
    follow_repeat_ms: int = 1000

    def __post_init__(self) -> None:
        if self.probe_interval_ms <= 0 or self.probe_timeout_ms <= 0:
            raise ValueError("the probe interval and timeout must be > 0")
        held = int(self.lease_ms * LEASE_SHARE)
        if held <= self.probe_interval_ms + self.probe_timeout_ms:
            raise ValueError(
                f"the lease ({self.lease_ms} ms) is too short: a master holds "
                f"{LEASE_SHARE:.0%} of it ({held} ms) from its last answer, which must "
                f"outlast a probe interval plus a probe timeout ({self.probe_interval_ms} + "
                f"{self.probe_timeout_ms} ms), or it lapses between probes"
            )


class ShardKeeper:
    def __init__(
        self,
        *,
        shard: int,
        nodes: Sequence[tuple[str, str]],
        record: ShardRecord,
        settings: KeeperSettings,
        admin: Admin,
        store: Callable[[ShardRecord], None],
        publish: Callable[[ShardRecord], None],
        clock_ms: Callable[[], int] = monotonic_ms,
        on_event: Callable[[str, str], None] | None = None,
    ) -> None:
        """``nodes``: (name, address) of each node of the shard, in node order (the
        address is what followers are told to follow); ``store`` records durably
        (raises ``OSError``); ``publish`` puts a master change into the shard map
        (raises ``OSError``); ``on_event`` (module notes) must not raise."""
        if record.master not in dict(nodes):
            raise ValueError(f"shard {shard}: the recorded master {record.master} is no node")
        self.shard = shard
        self.settings = s = settings
        self.admin = admin
        self._clock = clock_ms
        self.lock = threading.Lock()
        self._probes = Probes(
            nodes, admin, timeout_ms=s.probe_timeout_ms, lease_ms=s.lease_ms, clock_ms=clock_ms
        )
        self._watches = self._probes.watches
        self._ledger = Ledger(shard, record, store=store, publish=publish, on_event=on_event)
        self._actor = Actor(
            self._ledger,
            self._probes,
            lease_ms=s.lease_ms,
            command_timeout_ms=s.command_timeout_ms,
            follow_repeat_ms=s.follow_repeat_ms,
            clock_ms=clock_ms,
        )
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._retiring: frozenset[str] = frozenset()
        self.last_action: Action | None = None

    # -- what the supervisor asks
    @property
    def record(self) -> ShardRecord:
        return self._ledger.record

    def address(self, name: str) -> str:
        return self._watches[name].address

    def answers(self) -> dict[str, Answer | None]:
        """Each node's answer to the last probe (None: none), for status pages."""
        return dict(self._probes.answers())

    def start_target(
        self, name: str, *, blocking: bool = True, restart: bool = False
    ) -> tuple[bool, str | None]:
        """How node ``name`` is to start: ``(True, None)`` as the master, ``(True,
        address)`` following that address; ``(False, None)``: not now, ask again
        (the keeper is busy, only when not ``compaction.adding``; or a dead master waits
        for its failover).

        In sync mode a master that died (``restart``) while another in-sync member
        answers is not started again as the master: the shard fails over once its
        lease has run out (nothing acknowledged is lost: every in-sync member
        holds it), and it starts as a replica of the new master (a crashed broker
        loses its office, as under Kafka's and RocketMQ's controllers; its
        restart would race the failover). In async mode it restarts as the master
        at once: its log survived the kill, a replica's may lack the last
        acknowledged writes, and a failover happens only if the restart takes
        longer than the lease. With no such member it restarts as the master in
        either mode: no one else could take over."""
        if not self.lock.acquire(blocking=blocking):
            return False, None
        try:
            rec = self.record
            live_peer = any(n != name and self.up(n) for n in rec.insync)
            sync = self.settings.sync
            if restart and sync and name == rec.master and rec.in_office and live_peer:
                return False, None
            if name == rec.master and rec.in_office:
                self._watches[name].starting = True
                return True, None
            if name != rec.master:
                return True, self._watches[rec.master].address
            # the recorded master never took office: start it as a replica (of the
            # last node seen as a master), so that the decision promotes it again
            others = [w for n, w in self._watches.items() if n != name]

            def rank(w: Watch) -> tuple[bool, int]:
                return (w.last is not None and w.last.role == MASTER, _epoch(w.last))

            return True, max(others, key=rank).address
        finally:
            self.lock.release()

    def retire(self, names: frozenset[str]) -> None:
        """The nodes that are going away from now on (see the module notes); an
        empty set when none is. (Without the lock: read once a tick.)"""
        self._retiring = frozenset(names)

    def stopped(self, name: str) -> None:
        """Node ``name``'s process is gone (or never started): it cannot deliver.
        (Without the lock, so the supervisor never waits for a tick: a dead process
        is bounded whenever the keeper learns it.)"""
        self._watches[name].starting = False

    def up(self, name: str) -> bool:
        """Node ``name`` answered the last probe and is not recovering."""
        return self._probes.up(name)

    def ready(self) -> bool:
        """The recorded master was seen in office and holds a lease (so a failover
        can replace it: a master never given one would never stop), and in sync
        mode the in-sync set has ``min_insync`` members (sync writes can be
        acknowledged)."""
        rec = self.record
        enough = not self.settings.sync or len(rec.insync) >= self.settings.min_insync
        leased = not self._watches[rec.master].starting
        return self._ledger.seen_in_office and leased and enough

    # -- the loop
    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"keeper-shard-{self.shard}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        self.admin.close()

    def _run(self) -> None:
        interval = self.settings.probe_interval_ms
        while not self._stopping.is_set():
            began = self._clock()
            try:
                self.tick()
            except Exception:
                log.exception("shard %d: the failover loop failed a tick", self.shard)
            left = began + interval - self._clock()
            self._stopping.wait(max(0, left) / 1000)

    def tick(self) -> Action:
        """One round: probe every node, decide, act, keep the in-sync set."""
        with self.lock:
            ledger, s = self._ledger, self.settings
            rec = ledger.record
            sent = self._probes.round(rec)
            master = self._probes.answer(rec.master)
            if in_office(master, rec.epoch):
                ledger.took_office(sent)
            else:  # no master to be in touch with: the in-sync clocks wait
                self._probes.in_sync_since(sent)
            if unfounded(ledger.record):
                self.last_action = self._found(ledger.record)
                return self.last_action
            view = shard_view(
                rec,
                self._watches.values(),
                now_ms=self._clock(),
                lease_ms=s.lease_ms,
                min_insync=s.min_insync,
            )
            retiring = self._retiring
            choice = choose(rec, view, self._watches, retiring)
            action = choice.action
            if choice.heirs and ledger.first_loss():
                ledger.event(
                    "HandOver",
                    f"shard {self.shard}: master {rec.master} is going away; handing over to "
                    f"one of {', '.join(choice.heirs)}",
                )
            self.last_action = action
            ledger.say(action)
            self._actor.act(action)
            if isinstance(action, (Nothing, Follow)) and master is not None:
                now = ledger.record
                same = (now.epoch, now.master, now.insync) == (rec.epoch, rec.master, rec.insync)
                if same and in_office(master, rec.epoch):
                    keep_insync(
                        ledger,
                        self._probes,
                        master,
                        sent,
                        now_ms=self._clock(),
                        lease_ms=s.lease_ms,
                        min_insync=s.min_insync,
                        sync=s.sync,
                        retiring=retiring,
                    )
            ledger.publish_if_due()
            return action

    def _found(self, rec: ShardRecord) -> Action:
        """A new shard's first master (``founding``), promoted the way a failover's
        is (recorded first when it differs)."""
        step = founding(rec, self._probes.answers())
        if not isinstance(step, Found):
            action: Action = Nothing(step.reason)
            self._ledger.say(action)
            return action
        new = step.record
        followers = tuple((n, new.master) for n in self._watches if n != new.master and self.up(n))
        if new != rec and not self._ledger.save(new):
            return Nothing("cannot record the new shard's master")
        self._actor.promote(new, rec.master, followers)
        return Promote(new.master, new.epoch, followers)


def _epoch(a: Answer | None) -> int:
    return 0 if a is None else a.epoch
