"""What a run of ``delayq cluster up`` takes over in its directory, before any node
starts: the lock (``dir_lock``: one supervisor a directory), the shard map a
previous run left (``take_map``) and each shard's record from ``cluster.json``
(``take_records``).

Invariants: a map is taken only when it describes the same shard count (else
``ClusterError``, nothing started); a record is taken only when its master is
still a node of the layout, its in-sync set cut to the nodes that exist now and
always holding the master; a shard without a record starts with node 0 as the
master at the map's epoch (1 for a new map). Nothing here writes a file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
from collections.abc import Iterator

from ..atomicfile import read_text
from ..control.record import ShardRecord
from ..shardmap import ShardMap, ShardMapError, parse
from .clusterfile import parse as parse_clusterfile
from .errors import ClusterError
from .layout import Layout

__all__ = ["dir_lock", "take_map", "take_records"]


@contextlib.contextmanager
def dir_lock(layout: Layout) -> Iterator[None]:
    """Hold ``DIR/cluster.lock`` (flock) for the block; ``ClusterError`` naming the
    holder's pid when another ``cluster up`` holds it."""
    try:
        fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ClusterError(f"cannot lock {layout.lock_path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ClusterError(
                f"{layout.dir} is in use by another `delayq cluster up`{_holder(layout)}"
            ) from None
        yield
    finally:
        os.close(fd)


def _holder(layout: Layout) -> str:
    with contextlib.suppress(ClusterError, OSError):
        text = read_text(layout.state_path)
        if text is not None:
            return f" (pid {parse_clusterfile(text).supervisor_pid})"
    return ""


def take_map(layout: Layout) -> ShardMap | None:
    """The map in DIR (None: none yet); ``ClusterError`` when it cannot be used."""
    text = read_text(layout.map_path)
    try:
        existing = None if text is None else parse(text)
    except ShardMapError as exc:
        raise ClusterError(f"{layout.map_path}: {exc}") from None
    layout.shard_map(existing)  # refuses another shard count
    return existing


def take_records(layout: Layout, existing: ShardMap | None) -> dict[int, ShardRecord]:
    """Each shard's record: the one in ``cluster.json`` when there is one (its
    in-sync set cut to the nodes that exist now), else node 0 as the master at
    the map's epoch (1 when new)."""
    text = read_text(layout.state_path)
    old = {} if text is None else parse_clusterfile(text, str(layout.state_path)).by_shard()
    out: dict[int, ShardRecord] = {}
    for s in range(layout.shards):
        names = {n.name for n in layout.shard_nodes(s)}
        rec = old.get(s)
        if rec is None:
            first = layout.node(s, 0).name
            epoch = 1 if existing is None else existing.shards[s].epoch
            rec = ShardRecord(shard=s, epoch=epoch, master=first, insync=frozenset({first}))
        elif rec.master not in names:
            layout.entry(s, rec.master, rec.epoch)  # raises, naming the master
        out[s] = dataclasses.replace(rec, insync=(rec.insync & names) | {rec.master}, stuck="")
    return out
