"""A shard keeper carrying out an action (``Actor``): admin commands, with the
record written first where the decision's rules require it.

- ``Fence(node, epoch)``: admin ``Fence(epoch)``.
- ``Promote(node, new_epoch, followers)``: the new record (epoch, master, in-sync
  set ``{node}``, one more failover) is saved durably first; if that fails nothing
  is sent (an epoch is handed out once, whatever becomes of the command). Then
  ``Promote(new_epoch, [node], lease)`` with the token of the node's latest answer;
  once it returned, ``Follow(new_epoch, <its address>)`` to each follower and the
  master is published.
- ``Follow(node, master, epoch)``: admin ``Follow``; the same one is not repeated
  to a node within ``follow_repeat_ms`` (a replica reports the new epoch once it
  has connected).
- ``Stuck``: recorded once a reason (``Ledger.stuck``); any other action clears it.

A command that fails is logged and dropped: the next round decides afresh.
"""

from __future__ import annotations

from collections.abc import Callable

from .admin import AdminError, fence_request, follow_request, promote_request
from .failoveractions import Action, Fence, Follow, Nothing, Promote, Stuck
from .ledger import Ledger, log
from .membership import in_office
from .probing import Probes
from .record import ShardRecord
from .views import Answer

__all__ = ["Actor"]


class Actor:
    def __init__(
        self,
        ledger: Ledger,
        probes: Probes,
        *,
        lease_ms: int,
        command_timeout_ms: int,
        follow_repeat_ms: int,
        clock_ms: Callable[[], int],
    ) -> None:
        self._ledger = ledger
        self._probes = probes
        self._lease_ms = lease_ms
        self._timeout_s = command_timeout_ms / 1000
        self._follow_repeat_ms = follow_repeat_ms
        self._clock = clock_ms
        self._follows: dict[str, tuple[int, str, int]] = {}

    def act(self, action: Action) -> None:
        ledger = self._ledger
        rec = ledger.record
        shard = ledger.shard
        if isinstance(action, (Fence, Promote)) and ledger.first_loss():
            gone = self._clock() - self._probes.watches[rec.master].seen_ms
            ledger.event(
                "MasterLost",
                f"shard {shard}: master {rec.master} of epoch {rec.epoch} lost "
                f"(last answered {gone} ms ago); failing over",
            )
        match action:
            case Fence(node=node, epoch=epoch):
                log.warning(
                    "shard %d: fencing %s at epoch %d",
                    shard,
                    node,
                    epoch,
                    extra=ledger.fields(node=node, epoch=epoch),
                )
                if self.command(node, "Fence", fence_request(epoch)) is not None:
                    ledger.event("Fenced", f"shard {shard}: {node} fenced at epoch {epoch}")
            case Promote(node=node, new_epoch=epoch, followers=followers):
                new = ShardRecord(
                    shard=rec.shard,
                    epoch=epoch,
                    master=node,
                    insync=frozenset({node}),
                    failovers=rec.failovers + 1,
                    in_office=False,
                )
                if ledger.save(new):  # record first (module notes)
                    self.promote(new, rec.master, followers, old_epoch=rec.epoch)
            case Follow(node=node, master=master, epoch=epoch):
                self.follow(node, master, epoch)
            case Stuck():
                ledger.stuck(action)
            case Nothing():
                pass
        if not isinstance(action, Stuck):
            ledger.unstuck()

    def promote(
        self,
        new: ShardRecord,
        old_master: str,
        followers: tuple[tuple[str, str], ...],
        *,
        old_epoch: int = 0,
    ) -> None:
        """Promote the recorded ``new.master`` at ``new.epoch`` (already recorded),
        then tell the followers and publish it."""
        ledger = self._ledger
        node, epoch = new.master, new.epoch
        self._probes.in_sync_since(self._clock())
        was = f"was {old_master} at epoch {old_epoch}" if old_epoch else "a new shard"
        log.warning(
            "shard %d: promoting %s to master at epoch %d (%s)",
            ledger.shard,
            node,
            epoch,
            was,
            extra=ledger.fields(node=node, epoch=epoch, old_master=old_master),
        )
        w = self._probes.watches[node]
        request = promote_request(epoch, new.insync, self._lease_ms, w.lease_token)
        answer = self.command(node, "Promote", request)
        if answer is None:
            return
        w.observe(answer, self._clock())
        if in_office(answer, epoch):
            ledger.took_office(self._clock())
        ledger.event(
            "Promoted", f"shard {ledger.shard}: {node} is the master at epoch {epoch}, {was}"
        )
        for follower, _ in followers:
            self.follow(follower, node, epoch, again=True)
        ledger.publish_if_due()

    def follow(self, node: str, master: str, epoch: int, *, again: bool = False) -> None:
        address = self._probes.address(master)
        now = self._clock()
        last = self._follows.get(node)
        if (
            not again
            and last is not None
            and last[:2] == (epoch, address)
            and now - last[2] < self._follow_repeat_ms
        ):
            return
        self._follows[node] = (epoch, address, now)
        log.info(
            "shard %d: telling %s to follow %s (%s) at epoch %d",
            self._ledger.shard,
            node,
            master,
            address,
            epoch,
            extra=self._ledger.fields(node=node, epoch=epoch, master=master),
        )
        self.command(node, "Follow", follow_request(epoch, address))

    def command(self, node: str, method: str, request: object) -> Answer | None:
        """Send one admin command; its answer (None: it failed, logged)."""
        try:
            return self._probes.admin.command(node, method, request, self._timeout_s)
        except AdminError as exc:
            log.warning(
                "shard %d: %s to %s failed: %s",
                self._ledger.shard,
                method,
                node,
                exc,
                extra=self._ledger.fields(node=node, command=method, code=exc.code),
            )
            return None
