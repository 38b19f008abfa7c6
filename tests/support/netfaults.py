"""Network faults for tests, Jepsen-style, over real network namespaces.

``Net`` puts each member (the control plane, the client, every node) in its own
network namespace, joined by veth pairs to a bridge in a namespace of its own,
on a private /24 (``10.231.K.0/24``, K per process, used only inside these
namespaces). The test process itself joins the bridge too, as the *observer*
(``.1``): it reads metrics and status over a path no fault ever cuts.

Faults are nftables rules inside the members' namespaces (table ``inet
dqfault``): ``drop`` (one way, by address pair), ``reject`` (TCP reset),
``loss`` (``numgen random`` on every link between members); ``heal`` deletes
them all. Delay needs a relay (this kernel has no netem): ``relay`` starts
``tests.support.relay`` in the sender's namespace and redirects the sender's
new TCP connections to the receiver through it (table ``ip dqrelay``, skipping
the relay's own marked connections); ``delay`` then sets how long it holds what
the sender sends, on open connections too. ``close`` kills every process left in
the namespaces and deletes them, even after a failure.

Needs root and a kernel with network namespaces, veth, bridge and nftables
(``nft`` from ``make system-deps``). ``Net.available()`` says why not when not.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["Net", "NetUnavailable"]

ROOT = Path(__file__).resolve().parents[2]
RELAY_MARK = 0x2A
"""The mark the relay's own connections carry: the redirect skips them."""
RELAY_PORT = 17001


class NetUnavailable(RuntimeError):
    """Namespaces or nftables cannot be used here (the message says why)."""


def _run(*argv: str, stdin: str | None = None) -> None:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def _nft_table(prefix: Sequence[str], table: str, hook: str, rules: Sequence[str]) -> None:
    """Replace ``table`` (in the namespace ``prefix`` enters) with one output chain
    (``hook``: "filter hook output priority 0") holding ``rules``, atomically."""
    body = "\n".join(f"    {r}" for r in rules)
    script = (
        f"table {table}\ndelete table {table}\n"
        f"table {table} {{\n  chain out {{\n"
        f"    type {hook}; policy accept;\n"
        f"{body}\n  }}\n}}\n"
    )
    _run(*prefix, "nft", "-f", "-", stdin=script)


class GroupFaults:
    """Faults for the processes of one group in the host's own namespace, for a
    control plane that cannot have a namespace of its own (the Kubernetes tests'
    operator: the local kubelet's pods share the host's): what the group's
    sockets send to an address vanishes. Start the processes with ``launcher``
    (their group id becomes ``gid``; root stays root) and match them by it."""

    def __init__(self, gid: int = 4711) -> None:
        self.gid = gid
        self.table = f"inet dqgroup{gid}"
        self._rules: list[str] = []

    def launcher(self) -> list[str]:
        return ["setpriv", f"--regid={self.gid}", "--clear-groups"]

    def drop(self, address: str, port: int | None = None) -> None:
        """The group's packets to ``address`` (on ``port``, when given) vanish."""
        on = f" tcp dport {port}" if port is not None else ""
        self._rules.append(f"meta skgid {self.gid} ip daddr {address}{on} drop")
        _nft_table([], self.table, "filter hook output priority 0", self._rules)

    def heal(self) -> None:
        if self._rules:
            _run("nft", "delete", "table", *self.table.split())
        self._rules.clear()


class Net:
    def __init__(self, members: Sequence[str], *, subnet: int | None = None) -> None:
        """``members``: short names (``cp``, ``client``, ``n0``...), each given a
        namespace and the address ``10.231.K.(11 + its place)``."""
        self.k = subnet if subnet is not None else 1 + os.getpid() % 250
        self.prefix = f"dq{self.k}"
        self.members = list(members)
        self.observer = f"10.231.{self.k}.1"
        self._addr = {m: f"10.231.{self.k}.{11 + i}" for i, m in enumerate(self.members)}
        self._relays: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self._faults: dict[str, list[str]] = {}
        self._routes: dict[str, set[tuple[str, int]]] = {}
        self.up = False

    # -- life
    @staticmethod
    def available() -> str:
        """Why namespaces cannot be used here ("" when they can)."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        for tool in ("ip", "nft"):
            if shutil.which(tool) is None:
                return f"`{tool}` is missing (make system-deps installs nftables)"
        probe = f"dqprobe{os.getpid()}"
        try:
            _run("ip", "netns", "add", probe)
            _run("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "t")
        except RuntimeError as exc:
            return f"cannot make a network namespace with nftables: {exc}"
        finally:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True)
        return ""

    def ns(self, member: str) -> str:
        return f"{self.prefix}-{member}" if member != "sw" else f"{self.prefix}-sw"

    def address(self, member: str) -> str:
        return self._addr[member]

    def exec_prefix(self, member: str) -> list[str]:
        """The command prefix that runs a program as ``member``."""
        return ["ip", "netns", "exec", self.ns(member)]

    def start(self) -> Net:
        """Make the namespaces; ``NetUnavailable`` says why they cannot be made."""
        why = self.available()
        if why:
            raise NetUnavailable(why)
        self.close()  # a namespace a killed run left behind
        sw = self.ns("sw")
        _run("ip", "netns", "add", sw)
        self.up = True
        _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", sw, "link", "set", "br0", "up")
        for i, m in enumerate(self.members):
            ns, port = self.ns(m), f"{self.prefix}p{i}"
            _run("ip", "netns", "add", ns)
            _run(
                "ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", port, "netns", sw
            )
            self._attach(sw, port)
            _run("ip", "-n", ns, "addr", "add", f"{self._addr[m]}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        obs = f"{self.prefix}obs"
        _run(
            "ip",
            "link",
            "add",
            obs,
            "type",
            "veth",
            "peer",
            "name",
            f"{self.prefix}po",
            "netns",
            sw,
        )
        self._attach(sw, f"{self.prefix}po")
        _run("ip", "addr", "add", f"{self.observer}/24", "dev", obs)
        _run("ip", "link", "set", obs, "up")
        return self

    @staticmethod
    def _attach(sw: str, port: str) -> None:
        _run("ip", "-n", sw, "link", "set", port, "master", "br0")
        _run("ip", "-n", sw, "link", "set", port, "up")

    def close(self) -> None:
        """Kill what runs in the namespaces, delete them (and the observer's link)."""
        for proc, _ in self._relays.values():
            proc.kill()
            proc.wait()
        self._relays.clear()
        names = [self.ns(m) for m in self.members] + [self.ns("sw")]
        for ns in names:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", f"{self.prefix}obs"], capture_output=True)
        self.up = False

    def __enter__(self) -> Net:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults
    def drop(self, src: str, dst: str) -> None:
        """Packets from ``src`` to ``dst`` vanish (one way)."""
        self._rule(src, f"ip daddr {self._addr[dst]} drop")

    def cut(self, a: str, b: str) -> None:
        """No packet either way between ``a`` and ``b``."""
        self.drop(a, b)
        self.drop(b, a)

    def isolate(self, member: str, others: Iterable[str]) -> None:
        for o in others:
            if o != member:
                self.cut(member, o)

    def reject(self, src: str, dst: str) -> None:
        """``src``'s TCP to ``dst`` is refused at once (reset)."""
        self._rule(src, f"ip daddr {self._addr[dst]} meta l4proto tcp reject with tcp reset")

    def loss(self, percent: int) -> None:
        """Each packet between members is dropped with this chance (the observer's
        are not)."""
        for m in self.members:
            self._rule(
                m,
                f"ip daddr != {self.observer} ip daddr 10.231.{self.k}.0/24 "
                f"numgen random mod 100 < {percent} drop",
            )

    def _rule(self, member: str, rule: str) -> None:
        rules = self._faults.setdefault(member, [])
        rules.append(rule)
        self._apply(member, rules)

    def _apply(self, member: str, rules: list[str]) -> None:
        self._table(member, "inet dqfault", "filter hook output priority 0", rules)

    def _table(self, member: str, table: str, hook: str, rules: Sequence[str]) -> None:
        _nft_table(self.exec_prefix(member), table, hook, rules)

    def heal(self) -> None:
        """Every drop, reject and loss gone (delays stay: ``delay(..., 0)``)."""
        for member in list(self._faults):
            _run(*self.exec_prefix(member), "nft", "delete", "table", "inet", "dqfault")
        self._faults.clear()

    def relay(self, src: str, dst: str, ports: Sequence[int]) -> None:
        """Route ``src``'s new TCP connections to ``dst`` on ``ports`` through a relay
        in ``src``'s namespace, which passes them on at once until ``delay`` says
        otherwise. Open connections keep their path: call this before they are made."""
        if src not in self._relays:
            delays = Path(f"/tmp/{self.prefix}-{src}-delays.json")
            delays.write_text("{}")
            proc = subprocess.Popen(
                [*self.exec_prefix(src), sys.executable, "-m", "tests.support.relay",
                 "--port", str(RELAY_PORT), "--mark", str(RELAY_MARK), "--delays", str(delays)],
                cwd=ROOT,
            )  # fmt: skip
            self._relays[src] = (proc, delays)
        routes = self._routes.setdefault(src, set())
        routes.update((self._addr[dst], p) for p in ports)
        redirects = [
            f"meta mark != {RELAY_MARK} ip daddr {a} tcp dport {p} redirect to :{RELAY_PORT}"
            for a, p in sorted(routes)
        ]
        self._table(src, "ip dqrelay", "nat hook output priority -100", redirects)

    def delay(self, src: str, dst: str, ms: int) -> None:
        """What ``src`` sends to ``dst`` through its relay (``relay``) is held for
        ``ms`` before it is passed on (0: at once), from now on, on open
        connections too."""
        _, delays = self._relays[src]
        table = json.loads(delays.read_text())
        table[self._addr[dst]] = ms
        tmp = delays.with_suffix(".tmp")
        tmp.write_text(json.dumps(table))
        tmp.replace(delays)
