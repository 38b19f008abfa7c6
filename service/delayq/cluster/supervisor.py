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
(``state.ShardRecord``) before acting on them. A node is started as the master
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
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TextIO

from ..atomicfile import read_text, write_atomic
from ..control.admin import GrpcAdmin
from ..control.keeper import KeeperSettings, ShardKeeper
from ..control.record import ShardRecord
from ..shardmap import ShardEntry, ShardMap, ShardMapError, parse
from . import probe
from .certs import LocalTls, control_tls, local_tls, public_tls
from .clusterfile import RUNNING, STOPPED, ClusterState, NodeRecord
from .clusterfile import parse as parse_state
from .errors import ClusterError
from .freeports import check_free
from .layout import HOST, Layout, Node, plan
from .restarts import RestartPolicy
from .scaling import Scaler

__all__ = ["READY_PREFIX", "Supervisor", "node_line", "ready_line", "serve_argv"]

log = logging.getLogger("delayq.cluster")

READY_PREFIX = "cluster up: "
"""Starts the line printed once every node serves (``ready_line``)."""
POLL_S = 0.1
"""How often processes are polled and starting nodes probed."""
PROBE_TIMEOUT_S = 0.5


def serve_argv(
    python: str,
    node: Node,
    map_path: Path,
    *,
    replication: str | None = None,
    min_insync: int = 1,
    follow: str | None = None,
    tls: LocalTls | None = None,
) -> list[str]:
    """The command line of a node's ``delayq serve`` (pure). With ``replication``
    (a shard of several nodes) it serves under its name with that mode, as a
    replica of ``follow`` when given, else as a master. With ``tls`` it serves TLS
    with the local CA's node certificate, its admin port only to that CA's."""
    extra: list[str] = []
    if tls is not None:
        extra += ["--tls-cert", str(tls.node_cert), "--tls-key", str(tls.node_key)]
        extra += ["--admin-client-ca", str(tls.ca)]
    if replication is not None:
        extra += ["--node-name", node.name, "--replication", replication]
        extra += ["--min-insync", str(min_insync)]
        if follow is not None:
            extra += ["--follow", follow]
    return [
        python,
        "-m",
        "delayq.cli.main",
        "serve",
        "--shard-map",
        str(map_path),
        "--shard",
        str(node.shard),
        "--data-dir",
        str(node.data_dir),
        "--listen",
        node.address,
        "--metrics-listen",
        node.metrics_address,
        "--admin-listen",
        node.admin_address,
        "--log-format",
        "json",
        *extra,
    ]


def node_line(node: Node, pid: int) -> str:
    """``node shard-0/node-0 serving on 127.0.0.1:7500 (metrics 127.0.0.1:7501,
    admin 127.0.0.1:7502, pid 4243, log DIR/shard-0/node-0.log)``"""
    return (
        f"node {node.label} serving on {node.address} (metrics {node.metrics_address}, "
        f"admin {node.admin_address}, pid {pid}, log {node.log_path})"
    )


def ready_line(layout: Layout) -> str:
    """``cluster up: 3 shard(s), 1 node(s) each, map DIR/shards.json`` (and with TLS
    ``, TLS: CA DIR/tls/ca.crt``)"""
    tls = f", TLS: CA {LocalTls(layout.tls_dir).ca}" if layout.tls else ""
    return (
        f"{READY_PREFIX}{layout.shards} shard(s), {layout.replicas} node(s) each, "
        f"map {layout.map_path}{tls}"
    )


@dataclass(kw_only=True)
class _Running:
    """A node and its current process (mutable: the supervisor's bookkeeping)."""

    node: Node
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    starts: int = 0
    delay_s: float | None = None
    """The back-off before the current run; None until the node first died."""
    due_at: float = 0.0
    """When a dead node is to start again."""
    serving: bool = False
    announced: bool = False
    """Its ``node_line`` was printed (once a run, before the ready line)."""

    @property
    def pid(self) -> int:
        return 0 if self.proc is None else self.proc.pid


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
        self.keeper_settings = keeper or KeeperSettings(
            min_insync=layout.view_min_insync, sync=layout.replication == "sync"
        )
        self._nodes = [_Running(node=n) for n in layout.nodes]
        self._signals = 0
        self._ready = False
        self._watching = False
        self._records: dict[int, ShardRecord] = {}
        self._keepers: dict[int, ShardKeeper] = {}
        self._state = RUNNING
        self._state_lock = threading.Lock()
        self._map_lock = threading.Lock()
        self._map: ShardMap | None = None
        # the nodes, keepers and layout, which ``cluster scale`` changes while the
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
        with self._lock():
            existing = self._take_map()
            self._records = self._take_records(existing)
            shard_map = self.layout.shard_map(
                existing, {s: (r.master, r.epoch) for s, r in self._records.items()}
            )
            check_free(HOST, self.layout.local_ports())
            try:
                self.tls_files = local_tls(self.layout.dir) if self.layout.tls else None
                write_atomic(self.layout.map_path, shard_map.dumps())
                self._map = shard_map
                self._save(RUNNING)  # the shards' records, before any node starts
            except OSError as exc:
                raise ClusterError(
                    f"cannot write in {self.layout.dir}: {exc.strerror or exc}"
                ) from None
            if self.layout.replicas > 1:
                self._keepers = {s: self._keeper(s) for s in range(self.layout.shards)}
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
                    for r in self._nodes:
                        self._start(r)
                    for k in self._keepers.values():
                        k.start()
                    self._watching = True
                    self._scaler.start()
                    self._watch()
                finally:
                    self._scaler.stop()
                    for k in self._keepers.values():
                        k.stop()  # no failover while the nodes stop
                    self._stop_all()
        return 0

    def _keeper(self, shard: int) -> ShardKeeper:
        nodes = [(n.name, n.admin_address) for n in self.layout.shard_nodes(shard)]
        return ShardKeeper(
            shard=shard,
            nodes=nodes,
            record=self._records[shard],
            settings=self.keeper_settings,
            admin=GrpcAdmin(dict(nodes), control_tls(self.tls_files)),
            store=self._store,
            publish=self._publish,
        )

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        try:
            fd = os.open(self.layout.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ClusterError(
                f"cannot lock {self.layout.lock_path}: {exc.strerror or exc}"
            ) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ClusterError(
                    f"{self.layout.dir} is in use by another `delayq cluster up`{self._holder()}"
                ) from None
            yield
        finally:
            os.close(fd)

    def _holder(self) -> str:
        with contextlib.suppress(ClusterError, OSError):
            text = read_text(self.layout.state_path)
            if text is not None:
                return f" (pid {parse_state(text).supervisor_pid})"
        return ""

    def _take_map(self) -> ShardMap | None:
        """The map in DIR (None: none yet); ``ClusterError`` when it cannot be used."""
        text = read_text(self.layout.map_path)
        try:
            existing = None if text is None else parse(text)
        except ShardMapError as exc:
            raise ClusterError(f"{self.layout.map_path}: {exc}") from None
        self.layout.shard_map(existing)  # refuses another shard count
        return existing

    def _take_records(self, existing: ShardMap | None) -> dict[int, ShardRecord]:
        """Each shard's record: the one in ``cluster.json`` when there is one (its
        in-sync set cut to the nodes that exist now), else node 0 as the master at
        the map's epoch (1 when new)."""
        text = read_text(self.layout.state_path)
        old = {} if text is None else parse_state(text, str(self.layout.state_path)).by_shard()
        out: dict[int, ShardRecord] = {}
        for s in range(self.layout.shards):
            names = {n.name for n in self.layout.shard_nodes(s)}
            rec = old.get(s)
            if rec is None:
                first = self.layout.node(s, 0).name
                epoch = 1 if existing is None else existing.shards[s].epoch
                rec = ShardRecord(shard=s, epoch=epoch, master=first, insync=frozenset({first}))
            elif rec.master not in names:
                self.layout.entry(s, rec.master, rec.epoch)  # raises, naming the master
            out[s] = dataclasses.replace(rec, insync=(rec.insync & names) | {rec.master}, stuck="")
        return out

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
        for r in self._nodes:
            if r.proc is not None and r.proc.poll() is not None:
                self._exited(r, now)
            if r.proc is None and now >= r.due_at:
                self._start(r)
            if r.proc is not None and not r.serving:
                self._check_serving(r)
        if (
            not self._ready
            and all(r.serving for r in self._nodes)
            and all(k.ready() for k in self._keepers.values())
        ):
            self._ready = True
            self._print(ready_line(self.layout))
            log.info("cluster up", extra={"map": str(self.layout.map_path)})

    # -- a change of the shard count (``scaling.ScaleHost``)
    def current_map(self) -> ShardMap:
        with self._map_lock:
            assert self._map is not None
            return self._map

    def serve_map(self, new: ShardMap) -> None:
        with self._map_lock:
            write_atomic(self.layout.map_path, new.dumps())
            self._map = new
        log.warning(
            "shard map: %d shard(s), %d active (topology epoch %d)",
            new.count,
            new.owners,
            new.topology_epoch,
            extra={"shards": new.count, "active": new.owners, "topology_epoch": new.topology_epoch},
        )

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
                self._records[s] = ShardRecord(
                    shard=s, epoch=1, master=first, insync=frozenset({first})
                )
            self._nodes += [_Running(node=n, due_at=math.inf) for n in added]
            if new.replicas > 1:
                for s in range(old, shards):
                    self._keepers[s] = self._keeper(s)
                    self._keepers[s].start()
            self._save(RUNNING)
            return [new.entry(s, new.node(s, 0).name, 1) for s in range(old, shards)]

    def start_shards(self, first: int) -> None:
        with self._nodes_lock:
            for r in self._nodes:
                if r.node.shard >= first and r.proc is None and r.starts == 0:
                    r.due_at = 0.0

    def shards_serving(self, first: int) -> bool:
        with self._nodes_lock:
            return all(r.serving for r in self._nodes if r.node.shard >= first) and all(
                k.ready() for s, k in self._keepers.items() if s >= first
            )

    def remove_shards(self, keep: int) -> None:
        with self._nodes_lock:
            gone = [r for r in self._nodes if r.node.shard >= keep]
            keepers = [self._keepers.pop(s) for s in sorted(self._keepers) if s >= keep]
            self._nodes = [r for r in self._nodes if r.node.shard < keep]
        for k in keepers:
            k.stop()
        self._stop_nodes(gone)
        with self._nodes_lock:
            removed = range(keep, self.layout.shards)
            epoch = self.current_map().topology_epoch
            self.layout = self._relayout(keep)
            for s in removed:
                self._records.pop(s, None)
                here = self.layout.dir / f"shard-{s}"
                with contextlib.suppress(FileNotFoundError):
                    here.rename(here.with_name(f"shard-{s}.removed-{epoch}"))
            self._save(RUNNING)
        log.warning("shards %d..%d removed", keep, removed.stop - 1, extra={"kept": keep})

    # -- one node
    def _start(self, r: _Running) -> None:
        """Start the node's process (a restart when it ran before). A start that
        fails here (the log cannot be opened, say) counts as an exit."""
        node = r.node
        keeper = self._keepers.get(node.shard)
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
            node.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(node.log_path, "ab") as out:  # the child keeps its own copy
                r.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=dict(os.environ, PYTHONUNBUFFERED="1"),
                )
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
                extra={**self._fields(r), "follow": follow or ""},
            )
        self._save(RUNNING)

    def _check_serving(self, r: _Running) -> None:
        keeper = self._keepers.get(r.node.shard)
        up = keeper is not None and keeper.up(r.node.name)  # a replica answering its admin
        if (
            not up
            and probe.health(r.node.address, PROBE_TIMEOUT_S, public_tls(self.tls_files))
            != probe.SERVING
        ):
            return
        r.serving = True
        if r.announced:
            log.info("node %s serving again", r.node.label, extra=self._fields(r))
        else:
            r.announced = True
            self._print(node_line(r.node, r.pid))

    def _exited(self, r: _Running, now: float) -> None:
        assert r.proc is not None
        self._down(r, now, _exit_name(r.proc.wait()), _last_line(r.node.log_path))

    def _down(self, r: _Running, now: float, exit: str, why: str) -> None:
        """The node's process is gone (or never started): schedule its restart."""
        ran_s = now - r.started_at
        r.delay_s = self.restarts.delay_s(r.delay_s, ran_s, served=r.serving)
        r.due_at = now + r.delay_s
        fields = self._fields(r)  # with the pid that exited
        r.proc, r.serving = None, False
        keeper = self._keepers.get(r.node.shard)
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
        self._save(RUNNING)

    def _fields(self, r: _Running) -> dict[str, object]:
        return {
            "node": r.node.label,
            "address": r.node.address,
            "pid": r.pid,
            "restarts": max(0, r.starts - 1),
        }

    # -- stopping
    def _stop_all(self) -> None:
        self._stop_nodes(self._nodes)
        self._save(STOPPED)
        log.info("stopped", extra={"dir": str(self.layout.dir)})

    def _stop_nodes(self, nodes: list[_Running]) -> None:
        """SIGTERM these nodes, SIGKILL those left after the grace; wait for all."""
        live = [r for r in nodes if r.proc is not None and r.proc.poll() is None]
        log.info(
            "stopping %d node(s)", len(live), extra={"nodes": len(live), "grace_s": self.grace_s}
        )
        for r in live:
            self._signal(r, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        signals = self._signals
        while any(r.proc is not None and r.proc.poll() is None for r in live):
            if time.monotonic() >= deadline or self._signals > max(signals, 1):
                for r in live:
                    if r.proc is not None and r.proc.poll() is None:
                        log.warning("node %s killed", r.node.label, extra=self._fields(r))
                        self._signal(r, signal.SIGKILL)
                break
            time.sleep(POLL_S)
        for r in nodes:
            if r.proc is not None:
                code = r.proc.wait()
                log.info(
                    "node %s stopped (%s)",
                    r.node.label,
                    _exit_name(code),
                    extra={**self._fields(r), "exit": _exit_name(code)},
                )
                r.proc = None

    @staticmethod
    def _signal(r: _Running, sig: int) -> None:
        if r.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                r.proc.send_signal(sig)

    # -- records
    def _store(self, rec: ShardRecord) -> None:
        """Record a shard's new metadata durably (a keeper's ``store``); raises
        ``OSError`` when ``cluster.json`` cannot be written (nothing changed then)."""
        with self._state_lock:
            old = self._records[rec.shard]
            self._records[rec.shard] = rec
            try:
                self._write_state()
            except OSError:
                self._records[rec.shard] = old
                raise

    def _publish(self, rec: ShardRecord) -> None:
        """Put shard ``rec.shard``'s recorded master and epoch into the shard map (the
        others its replicas), topology epoch + 1; nothing when it has them."""
        with self._map_lock:
            assert self._map is not None
            entry = dataclasses.replace(
                self.layout.entry(rec.shard, rec.master, rec.epoch),
                state=self._map.shards[rec.shard].state,
            )
            if self._map.shards[rec.shard] == entry:
                return
            shards = tuple(entry if e.index == rec.shard else e for e in self._map.shards)
            new = dataclasses.replace(
                self._map, shards=shards, topology_epoch=self._map.topology_epoch + 1
            )
            write_atomic(self.layout.map_path, new.dumps())
            self._map = new
        log.warning(
            "shard map: shard %d served by %s at epoch %d (topology epoch %d)",
            rec.shard,
            entry.master,
            rec.epoch,
            new.topology_epoch,
            extra={"shard": rec.shard, "master": entry.master, "epoch": rec.epoch},
        )

    # -- output
    def _save(self, state: str) -> None:
        with self._state_lock:
            self._state = state
            self._write_state()

    def _write_state(self) -> None:
        doc = ClusterState(
            supervisor_pid=os.getpid(),
            state=self._state,
            replication=self.layout.replication,
            min_insync=self.layout.min_insync,
            tls=self.layout.tls,
            shards=tuple(self._records[s] for s in sorted(self._records)),
            nodes=tuple(
                NodeRecord(
                    shard=r.node.shard,
                    node=r.node.name,
                    address=r.node.address,
                    metrics_address=r.node.metrics_address,
                    admin_address=r.node.admin_address,
                    pid=r.pid,
                    restarts=max(0, r.starts - 1),
                    data_dir=str(r.node.data_dir),
                    log=str(r.node.log_path),
                )
                for r in self._nodes
            ),
        )
        write_atomic(self.layout.state_path, doc.dumps())

    def _print(self, line: str) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.out.write(line + "\n")
            self.out.flush()


def _exit_name(code: int) -> str:
    """``0``, ``2``, or the signal that ended the process: ``SIGKILL``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
    return str(code)


def _last_line(path: Path, tail: int = 4096) -> str:
    """The log's last non-empty line (why a node that failed to start failed)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
