"""``delayq cluster up``: every node of a local cluster as a real ``delayq serve``
process, restarted when it dies, all stopped on SIGINT or SIGTERM.

A run: lock DIR (one supervisor a directory), take the shard map (``Layout``:
new, or the one in DIR when it describes the same shards) and write it
atomically, check every port is free, then start each node as
``python -m delayq.cli.main serve --shard-map DIR/shards.json --shard S ...``
with its stdout and stderr appended to its log. As each node answers health
SERVING, print ``node_line``; once all have, print ``ready_line`` (what scripts
wait for). From then on, until a signal:

* a node whose process exits, for whatever reason, is started again on the same
  data directory and ports (as a StatefulSet would), after a back-off that grows
  while it crash-loops (``RestartPolicy``); each exit and restart is logged;
* ``DIR/cluster.json`` is rewritten on every start and exit of a node, so it
  always names the pids running now.

With several nodes a shard (``--replicas``), each shard also has a failover loop
(``keeper.ShardKeeper``, a thread): it probes the shard's nodes over the admin
service, fails a master over with ``failover.decide``, keeps the in-sync set,
and records the shard's epoch, master and in-sync set in ``cluster.json``
(``control.record.ShardRecord``) before acting on them. A node is started as the master
only when it is the recorded master and has taken office; every other node with
``--follow`` the recorded master's admin address (the keepers call and the
replicas follow the nodes' admin ports). After a failover the shard map names
the new master (``publish``: its topology epoch raised). A shard of one node has
nothing to fail over to: no loop, no admin calls, no lease.

SIGINT or SIGTERM (a second one: kill at once): the failover loops stop first
(no failover while the nodes stop), then SIGTERM to every node, SIGKILL to those
still running after the grace, ``cluster.json`` marked stopped, exit 0.

Nodes stay in the supervisor's process group: a terminal's Ctrl-C reaches them
too (they stop themselves; none is restarted once stopping), and whoever kills
the group (a test on failure) leaves nothing behind. Supervisor logs go to
stderr (``--log-format json``: one object a line); stdout carries only the lines
above.

Here: the run (lock, start, watch, stop) and each node's start, serving and
exit. Elsewhere: ``takeover`` (the lock and what a run takes over in DIR),
``nodeprocess`` (a node's command line, process and stop), ``registry`` (the
shard map and ``cluster.json`` as the supervisor keeps and writes them),
``keepers`` (the failover loops' wiring), ``readylines`` (the lines on stdout),
``scaling`` (``cluster scale``, which calls back into ``ScaleHost`` here).
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from ..control.keeper import KeeperSettings
from ..control.record import ShardRecord
from ..shardmap import ShardEntry, ShardMap
from . import probe
from .certs import LocalTls, local_tls, public_tls
from .clusterfile import RUNNING, STOPPED
from .errors import ClusterError
from .freeports import check_free
from .keepers import ShardKeepers
from .layout import HOST, Layout, plan
from .nodeprocess import POLL_S, NodeRun, exit_name, last_line, serve_argv, spawn, stop_runs
from .readylines import node_line, ready_line
from .registry import ShardRegistry
from .restarts import RestartPolicy
from .scaling import Scaler
from .takeover import dir_lock, take_map, take_records

__all__ = ["Supervisor"]

log = logging.getLogger("delayq.cluster")

PROBE_TIMEOUT_S = 0.5


class Supervisor:
    def __init__(
        self,
        layout: Layout,
        *,
        out: TextIO = sys.stdout,
        python: str = sys.executable,
        restarts: RestartPolicy | None = None,
        grace_s: float = 20.0,
        keeper: KeeperSettings | None = None,
    ) -> None:
        self.layout = layout
        self.out = out
        self.python = python
        self.restarts = restarts or RestartPolicy()
        self.grace_s = grace_s
        self.runs = [NodeRun(node=n) for n in layout.nodes]
        self.registry = ShardRegistry(self)
        self.keepers = ShardKeepers(
            self,
            self.registry,
            keeper
            or KeeperSettings(min_insync=layout.view_min_insync, sync=layout.replication == "sync"),
        )
        self._signals = 0
        self._ready = False
        self._watching = False
        # the runs, keepers and layout, which ``cluster scale`` changes while the
        # watch loop runs over them (it holds this for each round)
        self._nodes_lock = threading.RLock()
        self._scaler = Scaler(self)
        self.tls_files: LocalTls | None = None  # with layout.tls: made on run

    @property
    def dir(self) -> Path:
        return self.layout.dir

    # -- the run
    def run(self) -> int:
        """Run until SIGINT or SIGTERM; 0 then. Raises ``ClusterError`` when the
        cluster cannot start (nothing was started then)."""
        try:
            self.layout.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ClusterError(f"cannot use {self.layout.dir}: {exc.strerror or exc}") from None
        with dir_lock(self.layout):
            existing = take_map(self.layout)
            records = self.registry.records
            records.update(take_records(self.layout, existing))
            shard_map = self.layout.shard_map(
                existing, {s: (r.master, r.epoch) for s, r in records.items()}
            )
            check_free(HOST, self.layout.local_ports())
            try:
                self.tls_files = local_tls(self.layout.dir) if self.layout.tls else None
                self.registry.write_map(shard_map)
                self.registry.save(RUNNING)  # the shards' records, before any node starts
            except OSError as exc:
                raise ClusterError(
                    f"cannot write in {self.layout.dir}: {exc.strerror or exc}"
                ) from None
            self.keepers.add(range(self.layout.shards))
            log.info(
                "starting %d shard(s) in %s",
                self.layout.shards,
                self.layout.dir,
                extra={
                    "dir": str(self.layout.dir),
                    "shards": self.layout.shards,
                    "replicas": self.layout.replicas,
                    "topology_epoch": shard_map.topology_epoch,
                },
            )
            with self._signals_caught():
                try:
                    for r in self.runs:
                        self._start(r)
                    self.keepers.start()
                    self._watching = True
                    self._scaler.start()
                    self._watch()
                finally:
                    self._scaler.stop()
                    self.keepers.stop()  # no failover while the nodes stop
                    self._stop_all()
        return 0

    @contextlib.contextmanager
    def _signals_caught(self) -> Iterator[None]:
        def caught(signum: int, frame: FrameType | None) -> None:
            self._signals += 1

        old = {s: signal.signal(s, caught) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

    def _watch(self) -> None:
        while not self._signals:
            with self._nodes_lock:
                self._watch_round()
            time.sleep(POLL_S)

    def _watch_round(self) -> None:
        now = time.monotonic()
        for r in self.runs:
            if r.proc is not None and r.proc.poll() is not None:
                self._exited(r, now)
            if r.proc is None and now >= r.due_at:
                self._start(r)
            if r.proc is not None and not r.serving:
                self._check_serving(r)
        if not self._ready and all(r.serving for r in self.runs) and self.keepers.ready():
            self._ready = True
            self._print(ready_line(self.layout))
            log.info("cluster up", extra={"map": str(self.layout.map_path)})

    # -- a change of the shard count (``scaling.ScaleHost``)
    def current_map(self) -> ShardMap:
        return self.registry.current_map()

    def change_map(self, change: Callable[[ShardMap], ShardMap | None]) -> ShardMap | None:
        return self.registry.change_map(change)

    def shards_running(self) -> int:
        with self._nodes_lock:
            return self.layout.shards

    def node_addresses(self, shards: Sequence[int]) -> dict[str, str]:
        wanted = set(shards)
        with self._nodes_lock:
            return {
                f"shard-{n.shard}/{n.name}": n.address
                for n in self.layout.nodes
                if n.shard in wanted
            }

    def _relayout(self, shards: int) -> Layout:
        lay = self.layout
        return plan(
            lay.dir,
            shards=shards,
            replicas=lay.replicas,
            base_port=lay.base_port,
            replication=lay.replication,
            min_insync=lay.min_insync,
            tls=lay.tls,
            placement=lay.placement,
        )

    def add_shards(self, shards: int) -> list[ShardEntry]:
        with self._nodes_lock:
            old = self.layout.shards
            new = self._relayout(shards)
            added = new.nodes[len(self.layout.nodes) :]
            check_free(HOST, (p for n in added if n.local for p in n.ports()))
            self.layout = new
            for s in range(old, shards):
                first = new.node(s, 0).name
                self.registry.records[s] = ShardRecord(
                    shard=s, epoch=1, master=first, insync=frozenset({first})
                )
            self.runs += [NodeRun(node=n, due_at=math.inf) for n in added]
            self.keepers.add(range(old, shards), start=True)
            self.registry.save(RUNNING)
            return [new.entry(s, new.node(s, 0).name, 1) for s in range(old, shards)]

    def start_shards(self, first: int) -> None:
        with self._nodes_lock:
            for r in self.runs:
                if r.node.shard >= first and r.proc is None and r.starts == 0:
                    r.due_at = 0.0

    def shards_serving(self, first: int) -> bool:
        with self._nodes_lock:
            return all(r.serving for r in self.runs if r.node.shard >= first) and (
                self.keepers.ready(first)
            )

    def remove_shards(self, keep: int) -> None:
        with self._nodes_lock:
            gone = [r for r in self.runs if r.node.shard >= keep]
            keepers = self.keepers.detach(keep)
            self.runs = [r for r in self.runs if r.node.shard < keep]
        for k in keepers:
            k.stop()
        stop_runs(gone, self.grace_s, lambda: self._signals)
        with self._nodes_lock:
            removed = range(keep, self.layout.shards)
            epoch = self.current_map().topology_epoch
            self.layout = self._relayout(keep)
            for s in removed:
                self.registry.records.pop(s, None)
                here = self.layout.dir / f"shard-{s}"
                with contextlib.suppress(FileNotFoundError):
                    here.rename(here.with_name(f"shard-{s}.removed-{epoch}"))
            self.registry.save(RUNNING)
        log.warning("shards %d..%d removed", keep, removed.stop - 1, extra={"kept": keep})

    # -- one node
    def _start(self, r: NodeRun) -> None:
        """Start the node's process (a restart when it ran before). A start that
        fails here (the log cannot be opened, say) counts as an exit."""
        node = r.node
        keeper = self.keepers.of(node.shard)
        follow = None
        if keeper is not None:
            ok, follow = keeper.start_target(
                node.name, blocking=not self._watching, restart=r.starts > 0
            )
            if not ok:  # its failover loop is mid-tick, or it waits for a failover
                r.due_at = time.monotonic() + POLL_S
                return
        replicated = self.layout.replicas > 1
        argv = [
            *node.launcher,
            *serve_argv(
                self.python,
                node,
                self.layout.map_path,
                replication=self.layout.replication if replicated else None,
                min_insync=self.layout.min_insync,
                follow=follow,
                tls=self.tls_files,
            ),
        ]
        r.starts += 1
        r.started_at = time.monotonic()
        r.serving = False
        try:
            r.proc = spawn(argv, node.log_path)
        except OSError as exc:
            self._down(r, r.started_at, "not started", str(exc))
            return
        if r.starts > 1:
            log.warning(
                "node %s restarted (restart %d, pid %d)%s",
                node.label,
                r.starts - 1,
                r.pid,
                "" if keeper is None else f" as {'a replica of ' + follow if follow else 'master'}",
                extra={**r.log_fields(), "follow": follow or ""},
            )
        self.registry.save(RUNNING)

    def _check_serving(self, r: NodeRun) -> None:
        keeper = self.keepers.of(r.node.shard)
        up = keeper is not None and keeper.up(r.node.name)  # a replica answering its admin
        if (
            not up
            and probe.health(r.node.address, PROBE_TIMEOUT_S, public_tls(self.tls_files))
            != probe.SERVING
        ):
            return
        r.serving = True
        if r.announced:
            log.info("node %s serving again", r.node.label, extra=r.log_fields())
        else:
            r.announced = True
            self._print(node_line(r.node, r.pid))

    def _exited(self, r: NodeRun, now: float) -> None:
        assert r.proc is not None
        self._down(r, now, exit_name(r.proc.wait()), last_line(r.node.log_path))

    def _down(self, r: NodeRun, now: float, exit: str, why: str) -> None:
        """The node's process is gone (or never started): schedule its restart."""
        ran_s = now - r.started_at
        r.delay_s = self.restarts.delay_s(r.delay_s, ran_s, served=r.serving)
        r.due_at = now + r.delay_s
        fields = r.log_fields()  # with the pid that exited
        r.proc, r.serving = None, False
        keeper = self.keepers.of(r.node.shard)
        if keeper is not None:
            keeper.stopped(r.node.name)
        log.warning(
            "node %s exited (%s) after %.1fs; restarting in %.1fs",
            r.node.label,
            exit,
            ran_s,
            r.delay_s,
            extra={
                **fields,
                "exit": exit,
                "ran_s": round(ran_s, 3),
                "restart_in_s": r.delay_s,
                "last_log_line": why,
            },
        )
        self.registry.save(RUNNING)

    # -- stopping, output
    def _stop_all(self) -> None:
        stop_runs(self.runs, self.grace_s, lambda: self._signals)
        self.registry.save(STOPPED)
        log.info("stopped", extra={"dir": str(self.layout.dir)})

    def _print(self, line: str) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.out.write(line + "\n")
            self.out.flush()
