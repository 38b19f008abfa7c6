"""The shard map a node serves by, read from ``--shard-map FILE`` and re-read
whenever the file changes (polled once a second; a ConfigMap mounted as a
directory changes by a symlink swap, which a poll of the content sees).

Invariants: the map always names this node's shard; its topology epoch never
goes down. A file that is unreadable, malformed, drops this shard, lowers the
epoch, or changes the content under the same epoch is logged and the last good
map is kept; at start-up there is no last good map, so a bad file stops the
server (``ValueError`` naming the file). Without a file the node serves alone:
``ShardMap.single`` of its own address, which owns every key and id.

While a rebalance finishes (``prepare``, from the job's admin ``Prepare``),
``rebalance.transfer`` holds its target until the map moves past the epoch the job planned
on, or the hold runs out unrenewed (a job that died). Its times (the hold, the
gap between reloads, when a hold began) are on the ``Clock`` it is given: the
engine's, when the server builds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from ..clock import Clock, SystemClock
from ..errors import FailedPrecondition, InvalidArgument
from ..shardmap import MAX_SHARDS, ShardMap, ShardMapError, parse
from .ownership import Moving

__all__ = ["POLL_S", "Topology"]

log = logging.getLogger("delayq.server")
POLL_S = 1.0
"""How often the map file is read again: a changed map is served within this."""
RELOAD_GAP_S = 0.05
"""A call refused as another shard's reads the file first, at most this often."""


class Topology:
    def __init__(
        self,
        path: Path | None,
        shard: int,
        advertise: str,
        admin: str = "",
        *,
        clock: Clock | None = None,
    ) -> None:
        """``admin``: this node's admin address, named in the map it makes of itself
        when it serves alone. ``clock``: the shard's (the real one when None)."""
        self.path = path
        self._clock: Clock = clock or SystemClock()
        self.shard = shard
        self.advertise = advertise
        self._text: bytes | None = None  # the file as last served
        self._bad: bytes | None = None  # the file as last refused
        self._why_bad = ""
        self.refused = 0
        """Calls refused as another shard's (counted by the servicer)."""
        self._told: dict[int, str] = {}  # shard -> address, from a rebalance's Release
        self._read_at = 0.0  # monotonic: when the file was last read
        self._moving: Moving | None = None
        self._moving_epoch = 0  # held while the map's topology epoch is at most this
        self._moving_until = 0.0  # monotonic: held until then unless renewed
        self._moving_since_ms = 0
        self._watchers: list[Callable[[ShardMap], None]] = []
        if path is None:
            self._map = ShardMap.single(advertise, admin)
            return
        try:
            self._text, self._map = self._read(None)
        except (OSError, ShardMapError) as exc:
            raise ValueError(f"shard map {path}: {_why(exc)}") from None
        self._check_self()

    @property
    def map(self) -> ShardMap:
        """The shard map served now."""
        return self._map

    @map.setter
    def map(self, new: ShardMap) -> None:
        self._map = new
        for watcher in list(self._watchers):
            watcher(new)

    def on_change(self, watcher: Callable[[ShardMap], None]) -> Callable[[], None]:
        """Call ``watcher`` with the map served now, and with each new one from then on
        (on the thread that changes it); returns what stops that."""
        self._watchers.append(watcher)
        watcher(self._map)
        return lambda: self._watchers.remove(watcher)

    def standalone_master(self, master: str) -> None:
        """A node serving without a map file follows ``master`` now (itself, as
        master): its one-shard map names that address, under a higher epoch."""
        if self.path is None and master and master != self.map.shards[0].master:
            epoch = self.map.topology_epoch + 1
            self.map = ShardMap.of_masters([master], topology_epoch=epoch, standalone=True)

    def _read(self, last: ShardMap | None) -> tuple[bytes, ShardMap]:
        assert self.path is not None
        text = self.path.read_bytes()
        return text, self._check(parse(text), last)

    def _check(self, new: ShardMap, last: ShardMap | None) -> ShardMap:
        if self.shard >= new.count:
            raise ShardMapError(
                f"has {new.count} shard(s) and none is this node's shard {self.shard}"
            )
        if last is not None and new != last:
            if new.topology_epoch < last.topology_epoch:
                raise ShardMapError(
                    f"topology_epoch {new.topology_epoch} is below the served {last.topology_epoch}"
                )
            if new.topology_epoch == last.topology_epoch:
                raise ShardMapError(
                    f"the map changed but its topology_epoch stayed {new.topology_epoch}; raise it"
                )
        return new

    def reload_now(self) -> bool:
        """``reload`` unless the file was read in the last ``RELOAD_GAP_S`` (a storm
        of misrouted calls reads it once)."""
        if self._clock.monotonic_s() - self._read_at < RELOAD_GAP_S:
            return False
        return self.reload()

    def reload(self) -> bool:
        """Read the file again; True when a new map is now served. A bad file is
        logged once (until it changes again)."""
        if self.path is None:
            return False
        self._read_at = self._clock.monotonic_s()
        try:
            text = self.path.read_bytes()
            if text in (self._text, self._bad):
                return False
            new = self._check(parse(text), self.map)
        except (OSError, ShardMapError) as exc:
            why = _why(exc)
            if why != self._why_bad:
                log.warning(
                    "shard map unusable; keeping the last good one",
                    extra={
                        "file": str(self.path),
                        "error": why,
                        "topology_epoch": self.map.topology_epoch,
                    },
                )
            self._why_bad = why
            self._bad = text if isinstance(exc, ShardMapError) else None
            return False
        self._text, self._bad, self._why_bad = text, None, ""
        if new == self.map:
            return False
        log.info(
            "shard map changed",
            extra={
                "file": str(self.path),
                "topology_epoch": new.topology_epoch,
                "shards": new.count,
            },
        )
        self.map = new
        self._check_self()
        return True

    def _check_self(self) -> None:
        """Warn when the map does not name this node (its advertised address) for its
        shard: a wrong ``--shard`` or ``--advertise``, or a map written for another
        cluster. Clients would not find this node there."""
        entry = self.map.shards[self.shard]
        if self.advertise not in (entry.master, *entry.replicas):
            log.warning(
                "this node is not in the shard map under its shard",
                extra={
                    "file": str(self.path),
                    "shard": self.shard,
                    "advertise": self.advertise,
                    "master": entry.master,
                    "replicas": list(entry.replicas),
                },
            )

    def tell_address(self, shard: int, address: str) -> None:
        """A rebalance moves messages to ``shard`` at ``address`` (maybe before the
        map names it): calls by their ids are passed on there."""
        if address:
            self._told[shard] = address

    def address_of(self, shard: int) -> str | None:
        """Where shard ``shard``'s master takes calls: the map's, else what a
        rebalance told (None: not known)."""
        if shard < self.map.count and not self.map.standalone:
            return self.map.shards[shard].master
        return self._told.get(shard)

    def prepare(self, owners: int, topology_epoch: int, hold_s: float, job: str) -> int:
        """Hold back schedules that a rebalance to ``owners`` active shards would
        place elsewhere (``ownership.Moving``) until the map moves past
        ``topology_epoch`` or ``hold_s`` passes without another call. Returns when
        the hold began (ms since the epoch): the same value while it lasts, so the
        job can tell a hold that lapsed (a restart, a failover) and was taken again.
        ``owners`` 0 drops the hold."""
        if owners == 0:
            self._moving = None
            return 0
        if not 1 <= owners <= MAX_SHARDS:
            raise InvalidArgument("owners", f"must be 1..{MAX_SHARDS}, got {owners}")
        if self.map.topology_epoch > topology_epoch:
            raise FailedPrecondition(
                f"topology_epoch: this node serves shard map epoch {self.map.topology_epoch}, "
                f"past the {topology_epoch} the rebalance planned on; fetch the map again"
            )
        held = self.moving()
        if held is None or held.owners != owners or self._moving_epoch != topology_epoch:
            self._moving_since_ms = self._clock.now_ms()
            log.info(
                "holding back schedules a rebalance moves",
                extra={"owners": owners, "job": job, "topology_epoch": topology_epoch},
            )
        self._moving = Moving(owners, job)
        self._moving_epoch = topology_epoch
        self._moving_until = self._clock.monotonic_s() + hold_s
        return self._moving_since_ms

    def moving(self) -> Moving | None:
        """The rebalance being finished, if its hold still stands."""
        m = self._moving
        if m is None:
            return None
        if (
            self.map.topology_epoch > self._moving_epoch
            or self._clock.monotonic_s() > self._moving_until
        ):
            self._moving = None
            return None
        return m

    async def watch(self, stop: asyncio.Event) -> None:
        """Reload every ``POLL_S`` until ``stop`` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await stop.wait()
            self.reload()


def _why(exc: BaseException) -> str:
    return exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
