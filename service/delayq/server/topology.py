"""The shard map a node serves by, read from ``--shard-map FILE`` and re-read
whenever the file changes (polled once a second; a ConfigMap mounted as a
directory changes by a symlink swap, which a poll of the content sees).

Invariants: the map always names this node's shard; its topology epoch never
goes down. A file that is unreadable, malformed, drops this shard, lowers the
epoch, or changes the content under the same epoch is logged and the last good
map is kept; at start-up there is no last good map, so a bad file stops the
server (``ValueError`` naming the file). Without a file the node serves alone:
``ShardMap.single`` of its own address, which owns every key and id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from ..shardmap import ShardMap, ShardMapError, parse

__all__ = ["POLL_S", "Topology"]

log = logging.getLogger("delayq.server")
POLL_S = 1.0
"""How often the map file is read again: a changed map is served within this."""


class Topology:
    def __init__(self, path: Path | None, shard: int, advertise: str) -> None:
        self.path = path
        self.shard = shard
        self.advertise = advertise
        self._text: bytes | None = None  # the file as last served
        self._bad: bytes | None = None  # the file as last refused
        self._why_bad = ""
        self.refused = 0
        """Calls refused as another shard's (counted by the servicer)."""
        self._told: dict[int, str] = {}  # shard -> address, from a rebalance's Release
        if path is None:
            self.map = ShardMap.single(advertise)
            return
        try:
            self._text, self.map = self._read(None)
        except (OSError, ShardMapError) as exc:
            raise ValueError(f"shard map {path}: {_why(exc)}") from None
        self._check_self()

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

    def reload(self) -> bool:
        """Read the file again; True when a new map is now served. A bad file is
        logged once (until it changes again)."""
        if self.path is None:
            return False
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

    async def watch(self, stop: asyncio.Event) -> None:
        """Reload every ``POLL_S`` until ``stop`` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await stop.wait()
            self.reload()


def _why(exc: BaseException) -> str:
    return exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
