"""The failover loop of one shard (``ShardKeeper``): probe, decide, act, again.

Every probe interval (250 ms) the keeper sends admin ``Status`` to every node of
its shard at once (deadline 400 ms), remembers the answers (``views.Watch``),
builds the ``failover.ShardView`` and carries out the one action
``failover.decide`` returns; then it keeps the recorded in-sync set current
(``membership``). Each shard has its own thread, so a shard whose nodes are slow to
answer never delays another's.

Carrying out an action:

* ``Fence(node, epoch)``: admin ``Fence(epoch)`` to the node.
* ``Promote(node, new_epoch, followers)``: first the new metadata (epoch, master,
  in-sync set ``{node}``) is recorded durably (``store``: ``cluster.json``,
  fsynced); if that fails nothing is sent. Then ``Promote(new_epoch, [node],
  lease)``; once it returned OK, ``Follow(new_epoch, <its address>)`` to each
  follower, and the shard map gets the new master (``publish``). A ``Promote``
  that did not land is met on a later tick: the recorded master then answers as
  a replica of an older epoch, and the decision promotes it again, higher.
* ``Follow(node, master, epoch)``: admin ``Follow(epoch, <master's address>)``; the
  same one is not repeated to a node within a second (a replica reports the new
  epoch once it has connected). Besides the decision's strays, a replica at the
  recorded epoch that follows no one (or another address) is told too: a pod
  restarts as a replica of no one.
* ``Stuck(reason)``: logged once a reason (numbers aside) and recorded as the
  shard's ``stuck`` for ``cluster status``; ``Nothing``: logged when it changes.

A shard whose record was never in office (``founding``: the operator starts
every pod as a replica) gets its first master from ``founding.founding``, not
from the decision, promoted the same way (recorded first when it differs).

Nodes about to go away (``retire``: a pod being deleted, or scaled away) leave
the shard in order: a retiring member leaves the in-sync set as soon as that is
safe (``insync.leaver``) and never joins it again; a retiring master still in
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

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .admin import (
    Admin,
    AdminError,
    fence_request,
    follow_request,
    promote_request,
    status_request,
)
from .failover import (
    DEFAULT_LEASE_MS,
    LEASE_SHARE,
    MASTER,
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
from .founding import Found, founding, unfounded
from .membership import caught_up, counts_in, in_office, joiners, leaver
from .record import ShardRecord
from .views import Answer, Watch, answers_of, shard_view

__all__ = ["KeeperSettings", "ShardKeeper", "monotonic_ms"]

log = logging.getLogger("delayq.cluster")


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


def _gist(action: Action) -> str:
    """The action with its numbers blanked: what 'the same reason' means for logs."""
    return re.sub(r"\d+", "#", repr(action))


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
        self.shard = shard
        self.settings = settings
        self.admin = admin
        self._store = store
        self._publish = publish
        self._clock = clock_ms
        self.lock = threading.Lock()
        now = clock_ms()
        self._watches = {
            name: Watch(name=name, address=address, seen_ms=now, in_ms=now)
            for name, address in nodes
        }
        if record.master not in self._watches:
            raise ValueError(f"shard {shard}: the recorded master {record.master} is no node")
        self._record = record
        self._seen_in_office = False
        self._published = (record.master, record.epoch)
        self._said = ""
        self._follows: dict[str, tuple[int, str, int]] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_event = on_event
        self._lost_epoch = 0
        self._retiring: frozenset[str] = frozenset()
        self.last_action: Action | None = None

    # -- what the supervisor asks
    @property
    def record(self) -> ShardRecord:
        return self._record

    def address(self, name: str) -> str:
        return self._watches[name].address

    def answers(self) -> dict[str, Answer | None]:
        """Each node's answer to the last probe (None: none), for status pages."""
        return dict(answers_of(self._watches.values()))

    def start_target(
        self, name: str, *, blocking: bool = True, restart: bool = False
    ) -> tuple[bool, str | None]:
        """How node ``name`` is to start: ``(True, None)`` as the master, ``(True,
        address)`` following that address; ``(False, None)``: not now, ask again
        (the keeper is busy, only when not ``blocking``; or a dead master waits
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
            rec = self._record
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
        w = self._watches[name]
        return w.reachable and w.last is not None and not w.last.recovering

    def ready(self) -> bool:
        """The recorded master was seen in office and holds a lease (so a failover
        can replace it: a master never given one would never stop), and in sync
        mode the in-sync set has ``min_insync`` members (sync writes can be
        acknowledged)."""
        rec = self._record
        enough = not self.settings.sync or len(rec.insync) >= self.settings.min_insync
        leased = not self._watches[rec.master].starting
        return self._seen_in_office and leased and enough

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
            rec = self._record
            s = self.settings
            requests = {
                name: status_request(rec.epoch, s.lease_ms, rec.insync, w.lease_token)
                for name, w in self._watches.items()
            }
            sent = self._clock()
            answers = self.admin.statuses(requests, s.probe_timeout_ms / 1000)
            got = self._clock()
            for name, w in self._watches.items():
                w.observe(answers.get(name), got)
            master = self._answer(rec.master)
            if in_office(master, rec.epoch):
                self._took_office()
            else:  # no master to be in touch with: the in-sync clocks wait
                for w in self._watches.values():
                    w.in_ms = sent
            if unfounded(self._record):
                self.last_action = self._found(self._record)
                return self.last_action
            view = shard_view(
                rec,
                self._watches.values(),
                now_ms=self._clock(),
                lease_ms=s.lease_ms,
                min_insync=s.min_insync,
            )
            retiring = self._retiring
            action = self._hand_over(rec, master, retiring) or decide(view)
            if isinstance(action, Promote) and action.node in retiring:
                # another eligible member, if any, rather than one going away
                action = decide(_without(view, retiring - {rec.master}))
            if isinstance(action, Nothing) and in_office(master, rec.epoch):
                action = self._unattached(rec) or action
            self.last_action = action
            self._say(action)
            self._act(action)
            if isinstance(action, (Nothing, Follow)) and master is not None:
                now = self._record
                same = (now.epoch, now.master, now.insync) == (rec.epoch, rec.master, rec.insync)
                if same and in_office(master, rec.epoch):
                    self._keep_insync(now, master, sent)
            self._publish_if_due()
            return action

    def _answer(self, name: str) -> Answer | None:
        w = self._watches[name]
        return w.last if w.reachable else None

    # -- actions
    def _found(self, rec: ShardRecord) -> Action:
        """A new shard's first master (``founding``)."""
        step = founding(rec, answers_of(self._watches.values()))
        if not isinstance(step, Found):
            action: Action = Nothing(step.reason)
            self._say(action)
            return action
        new = step.record
        followers = tuple((n, new.master) for n in self._watches if n != new.master and self.up(n))
        if new != rec and not self._save(new):
            return Nothing("cannot record the new shard's master")
        self._send_promote(new, rec.master, followers)
        return Promote(new.master, new.epoch, followers)

    def _unattached(self, rec: ShardRecord) -> Follow | None:
        """A replica at the recorded epoch that follows no one, or another address
        (a pod restarted as a replica of no one after it had adopted the epoch):
        the decision sees nothing stray in it, yet it must be told whom to follow."""
        want = self._watches[rec.master].address
        for name in sorted(self._watches):
            a = self._answer(name)
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

    def _hand_over(
        self, rec: ShardRecord, master: Answer | None, retiring: frozenset[str]
    ) -> Action | None:
        """Fence the recorded master when it is retiring, in office, and another
        in-sync member that stays can take over now (None: not so)."""
        if rec.master not in retiring or not in_office(master, rec.epoch):
            return None
        assert master is not None
        heirs = [
            n
            for n in rec.insync
            if n not in retiring and n != rec.master and self.up(n) and caught_up(master, n)
        ]
        if not heirs:
            return None
        if self._lost_epoch != rec.epoch:
            self._lost_epoch = rec.epoch
            self._event(
                "HandOver",
                f"shard {self.shard}: master {rec.master} is going away; handing over to "
                f"one of {', '.join(sorted(heirs))}",
            )
        return Fence(rec.master, rec.epoch)

    def _act(self, action: Action) -> None:
        rec = self._record
        if isinstance(action, (Fence, Promote)) and self._lost_epoch != rec.epoch:
            self._lost_epoch = rec.epoch
            gone = self._clock() - self._watches[rec.master].seen_ms
            self._event(
                "MasterLost",
                f"shard {self.shard}: master {rec.master} of epoch {rec.epoch} lost "
                f"(last answered {gone} ms ago); failing over",
            )
        match action:
            case Fence(node=node, epoch=epoch):
                log.warning(
                    "shard %d: fencing %s at epoch %d",
                    self.shard,
                    node,
                    epoch,
                    extra=self._fields(node=node, epoch=epoch),
                )
                if self._command(node, "Fence", fence_request(epoch)) is not None:
                    self._event("Fenced", f"shard {self.shard}: {node} fenced at epoch {epoch}")
            case Promote(node=node, new_epoch=epoch, followers=followers):
                self._promote(rec, node, epoch, followers)
            case Follow(node=node, master=master, epoch=epoch):
                self._follow(node, master, epoch)
            case Stuck(reason=reason):
                if rec.stuck != reason and _gist(action) != _gist(Stuck(rec.stuck)):
                    self._save(dataclasses.replace(rec, stuck=reason))
                    self._event("FailoverStuck", f"shard {self.shard}: {reason}")
            case Nothing():
                pass
        if not isinstance(action, Stuck) and self._record.stuck:
            self._save(dataclasses.replace(self._record, stuck=""))

    def _promote(
        self, rec: ShardRecord, node: str, epoch: int, followers: tuple[tuple[str, str], ...]
    ) -> None:
        new = ShardRecord(
            shard=rec.shard,
            epoch=epoch,
            master=node,
            insync=frozenset({node}),
            failovers=rec.failovers + 1,
            in_office=False,
        )
        # record first: an epoch is handed out once, whatever becomes of the command
        if self._save(new):
            self._send_promote(new, rec.master, followers, old_epoch=rec.epoch)

    def _send_promote(
        self,
        new: ShardRecord,
        old_master: str,
        followers: tuple[tuple[str, str], ...],
        *,
        old_epoch: int = 0,
    ) -> None:
        """Promote the recorded ``new.master`` at ``new.epoch`` (already recorded),
        then tell the followers."""
        node, epoch = new.master, new.epoch
        now = self._clock()
        for w in self._watches.values():
            w.in_ms = now
        was = f"was {old_master} at epoch {old_epoch}" if old_epoch else "a new shard"
        log.warning(
            "shard %d: promoting %s to master at epoch %d (%s)",
            self.shard,
            node,
            epoch,
            was,
            extra=self._fields(node=node, epoch=epoch, old_master=old_master),
        )
        s = self.settings
        w = self._watches[node]
        request = promote_request(epoch, new.insync, s.lease_ms, w.lease_token)
        answer = self._command(node, "Promote", request)
        if answer is None:
            return
        w.observe(answer, self._clock())
        if in_office(answer, epoch):
            self._took_office()
        self._event("Promoted", f"shard {self.shard}: {node} is the master at epoch {epoch}, {was}")
        for follower, _ in followers:
            self._follow(follower, node, epoch, again=True)
        self._publish_if_due()

    def _follow(self, node: str, master: str, epoch: int, *, again: bool = False) -> None:
        address = self._watches[master].address
        now = self._clock()
        last = self._follows.get(node)
        if (
            not again
            and last is not None
            and last[:2] == (epoch, address)
            and now - last[2] < self.settings.follow_repeat_ms
        ):
            return
        self._follows[node] = (epoch, address, now)
        log.info(
            "shard %d: telling %s to follow %s (%s) at epoch %d",
            self.shard,
            node,
            master,
            address,
            epoch,
            extra=self._fields(node=node, epoch=epoch, master=master),
        )
        self._command(node, "Follow", follow_request(epoch, address))

    def _command(self, node: str, method: str, request: object) -> Answer | None:
        try:
            return self.admin.command(
                node, method, request, self.settings.command_timeout_ms / 1000
            )
        except AdminError as exc:
            log.warning(
                "shard %d: %s to %s failed: %s",
                self.shard,
                method,
                node,
                exc,
                extra=self._fields(node=node, command=method, code=exc.code),
            )
            return None

    # -- the in-sync set (rules and reasons: ``membership``)
    def _keep_insync(self, rec: ShardRecord, master: Answer, sent: int) -> None:
        s = self.settings
        answers = answers_of(self._watches.values())
        for r in master.replicas:
            if r.name in self._watches:
                self._watches[r.name].note_flushed(rec.epoch, r.flushed)
        for name, w in self._watches.items():
            if name == rec.master or counts_in(name, rec.epoch, master, answers.get(name)):
                w.in_ms = sent
        join = joiners(rec.epoch, rec.master, rec.insync, master, answers) - self._retiring
        if join:
            # grow: record first, the next probe tells the master
            if self._save(dataclasses.replace(rec, insync=rec.insync | join)):
                now_in = sorted(self._record.insync)
                log.info(
                    "shard %d: %s joined the in-sync set, now %s",
                    self.shard,
                    ", ".join(sorted(join)),
                    now_in,
                    extra=self._fields(insync=now_in),
                )
                self._event(
                    "InSyncChanged",
                    f"shard {self.shard}: {', '.join(sorted(join))} joined; in sync: "
                    f"{', '.join(now_in)}",
                )
            return
        out = leaver(
            rec.epoch,
            rec.master,
            rec.insync,
            master,
            self._watches,
            now_ms=self._clock(),
            lease_ms=s.lease_ms,
            min_insync=s.min_insync,
            sync=s.sync,
            retiring=self._retiring,
        )
        if out is None:
            return
        # shrink: tell the master first, record once it has answered
        smaller = rec.insync - {out}
        w = self._watches[rec.master]
        request = status_request(rec.epoch, s.lease_ms, smaller, w.lease_token)
        answer = self.admin.statuses({rec.master: request}, s.probe_timeout_ms / 1000)
        told = answer.get(rec.master)
        w.observe(told, self._clock())
        if told is None or not in_office(told, rec.epoch):
            return
        if not told.insync <= smaller:
            log.warning(
                "shard %d: the master still counts %s after being told %s",
                self.shard,
                sorted(told.insync),
                sorted(smaller),
            )
            return
        if self._save(dataclasses.replace(rec, insync=smaller)):
            log.warning(
                "shard %d: %s left the in-sync set (out of touch for over %d ms), now %s",
                self.shard,
                out,
                s.lease_ms,
                sorted(smaller),
                extra=self._fields(node=out, insync=sorted(smaller)),
            )
            self._event(
                "InSyncChanged",
                f"shard {self.shard}: {out} left (out of touch for over {s.lease_ms} ms); "
                f"in sync: {', '.join(sorted(smaller))}",
            )

    # -- records and the map
    def _took_office(self) -> None:
        """The recorded master answered as the master at the recorded epoch."""
        self._seen_in_office = True
        if not self._record.in_office:
            self._save(dataclasses.replace(self._record, in_office=True))

    def _save(self, new: ShardRecord) -> bool:
        """Record ``new`` durably; False (logged) when that failed."""
        try:
            self._store(new)
        except OSError as exc:
            log.error("shard %d: cannot record %s: %s", self.shard, new, exc, extra=self._fields())
            return False
        self._record = new
        return True

    def _publish_if_due(self) -> None:
        rec = self._record
        if not rec.in_office or (rec.master, rec.epoch) == self._published:
            return
        try:
            self._publish(rec)
        except OSError as exc:
            log.error("shard %d: cannot write the shard map: %s", self.shard, exc)
            return
        self._published = (rec.master, rec.epoch)

    def _event(self, reason: str, message: str) -> None:
        if self._on_event is not None:
            self._on_event(reason, message)

    def _say(self, action: Action) -> None:
        gist = _gist(action)
        if gist == self._said or isinstance(action, (Fence, Promote, Follow)):
            return
        self._said = gist
        if isinstance(action, Stuck):
            log.error(
                "shard %d: stuck: %s",
                self.shard,
                action.reason,
                extra=self._fields(stuck=action.reason),
            )
        elif isinstance(action, Nothing):
            log.info("shard %d: %s", self.shard, action.reason, extra=self._fields())

    def _fields(self, **more: object) -> dict[str, object]:
        rec = self._record
        return {"shard": self.shard, "recorded_epoch": rec.epoch, "master": rec.master, **more}


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


def _epoch(a: Answer | None) -> int:
    return 0 if a is None else a.epoch
