"""The push tests' receiver and checker: ``Receiver`` runs
``tests/support/push_receiver.py`` as a process (started, stopped, restarted on
the same port, its verdicts read back) and ``check_verdicts`` judges them
against what the test had acknowledged, as Jepsen's checker reads a history:

    with Receiver(tmp_path / "rx", secrets=[SECRET], plan=[{"status": 200}]) as rx:
        ... schedule, noting each acknowledged id's due time ...
        counts = check_verdicts(acked, rx.verdicts())
        assert (counts.lost, counts.early, counts.unverified) == (0, 0, 0)

``secret()`` makes a Standard Webhooks secret (``whsec_`` + base64 of 24
random bytes) and ``write_secret`` puts it where ``--push-secret-dir`` reads it;
``schedule_spread`` schedules a load through a client (returning each acknowledged
id's due time), ``PushLoad`` keeps scheduling from a thread (through failovers:
a call that fails is not acknowledged, so not owed), ``wait_arrived`` waits for
the receiver to have answered each 2xx and ``push_stats`` reads a push group's
``PushStats`` from the shards' Stats.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets as random_bytes
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from delayq import Client, Outgoing, PushStats
from delayq.client import RetryPolicy
from tests.support.servers import ROOT

__all__ = [
    "Counts",
    "PushLoad",
    "Receiver",
    "Verdict",
    "check_verdicts",
    "push_stats",
    "schedule_spread",
    "secret",
    "wait_arrived",
    "write_secret",
]

SCRIPT = Path(__file__).with_name("push_receiver.py")


def secret() -> str:
    """A fresh Standard Webhooks signing secret."""
    return "whsec_" + base64.b64encode(random_bytes.token_bytes(24)).decode()


def write_secret(secret_dir: Path, ref: str, *values: str) -> Path:
    """``secret_dir/ref`` holding ``values`` one a line (two at once: a rotation)."""
    path = secret_dir / ref
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{v}\n" for v in values))
    return path


class Verdict(NamedTuple):
    """One request as the receiver saw it (``push_receiver.py``'s line)."""

    id: str
    attempt: int | None
    due_ms: int | None
    delivered_ms: int | None
    topic: str
    at_ms: int
    verified: bool | None
    sig_count: int
    status: int
    body_len: int

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Verdict:
        return cls(**{k: doc[k] for k in cls._fields})


@dataclass
class Receiver:
    out_dir: Path
    secrets: Sequence[str] = ()
    plan: Sequence[Mapping[str, Any]] = ()
    host: str = "127.0.0.1"
    port: int = 0
    prefix: Sequence[str] = ()
    """What runs the receiver (e.g. ``Net.exec_prefix("rx")``: in a namespace)."""
    proc: subprocess.Popen[str] | None = None
    runs: int = field(default=0)

    @property
    def out(self) -> Path:
        return self.out_dir / "verdicts.jsonl"

    def url(self, path: str = "/hook", host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"

    def start(self) -> Receiver:
        """Start it (on ``port``, or a free one the first time) and wait for READY."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        plan = self.out_dir / "plan.json"
        plan.write_text(json.dumps(list(self.plan)))
        self.runs += 1
        cmd = [*self.prefix, sys.executable, str(SCRIPT), "--host", self.host,
               "--port", str(self.port), "--plan", str(plan), "--out", str(self.out),
               *(a for s in self.secrets for a in ("--secret", s))]  # fmt: skip
        with open(self.out_dir / f"receiver-{self.runs}.log", "w") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )  # fmt: skip
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        while True:  # (a restart on the same port may wait for the old socket)
            line = self.proc.stdout.readline()
            if line.startswith("READY "):
                self.port = int(line.split()[1])
                return self
            if not line or time.monotonic() > deadline:
                self.stop()
                log = (self.out_dir / f"receiver-{self.runs}.log").read_text()
                raise AssertionError(f"the receiver did not start: {line!r}\n{log}")

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """End the process (SIGKILL by default: a receiver that just vanishes)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def restart(self, plan: Sequence[Mapping[str, Any]] | None = None) -> Receiver:
        """Stop, then start again on the same port (with ``plan`` if given)."""
        self.stop()
        if plan is not None:
            self.plan = plan
        return self.start()

    def verdicts(self) -> list[Verdict]:
        """Every request answered so far, in arrival order of the lines written."""
        if not self.out.exists():
            return []
        return [Verdict.of(json.loads(line)) for line in self.out.read_text().splitlines() if line]

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Counts:
    """What the checker found: ``lost`` acknowledged ids never answered 2xx,
    ``early`` requests that arrived before their message's due time, ``unverified``
    requests whose signature did not verify, ``duplicates`` 2xx answers beyond an
    id's first, ``unexpected`` ids the test never acknowledged, ``requests`` all."""

    lost: int
    early: int
    unverified: int
    duplicates: int
    unexpected: int
    requests: int
    lost_ids: tuple[str, ...] = ()

    def line(self) -> str:
        return (
            f"requests {self.requests}, lost {self.lost}, early {self.early}, unverified "
            f"{self.unverified}, duplicates {self.duplicates}, unexpected {self.unexpected}"
        )


def check_verdicts(acked: Mapping[str, int], verdicts: Iterable[Verdict]) -> Counts:
    """``acked``: each acknowledged message id -> its due time (Unix ms, as the test
    scheduled it). A request is early when it arrived before that time (the
    receiver's and delayq's clocks are this machine's)."""
    seen = list(verdicts)
    ok = Counter(v.id for v in seen if 200 <= v.status < 300)
    lost = sorted(i for i in acked if ok[i] == 0)
    return Counts(
        lost=len(lost),
        early=sum(1 for v in seen if v.id in acked and v.at_ms < acked[v.id]),
        unverified=sum(1 for v in seen if v.verified is False),
        duplicates=sum(n - 1 for n in ok.values() if n > 1),
        unexpected=len({v.id for v in seen} - set(acked)),
        requests=len(seen),
        lost_ids=tuple(lost[:20]),
    )


def schedule_spread(
    client: Client,
    topic: str,
    count: int,
    *,
    first_ms: int = 1000,
    step_ms: float = 1.0,
    batch: int = 500,
    acked: dict[str, int] | None = None,
) -> dict[str, int]:
    """Schedule ``count`` messages of ``topic``, the i-th due ``first_ms + i *
    step_ms`` after now (distinct due times: an order to check), in batches;
    returns (and adds to ``acked``) each acknowledged id -> its due time (ms)."""
    out = {} if acked is None else acked
    base = int(time.time() * 1000) + first_ms
    for start in range(0, count, batch):
        batch_of = [
            Outgoing(topic=topic, body=f"m{i}".encode(), at=base + round(i * step_ms),
                     headers={"content-type": "text/plain"})
            for i in range(start, min(count, start + batch))
        ]  # fmt: skip
        for done in client.schedule_many(batch_of):
            assert done.ok and done.id is not None, done.error
            out[done.id] = done.deliver_at_ms
    return out


def wait_arrived(rx: Receiver, acked: Mapping[str, int], timeout_s: float) -> list[Verdict]:
    """The verdicts once every id of ``acked`` was answered 2xx (AssertionError
    after ``timeout_s``, saying how many are missing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = rx.verdicts()
        done = {v.id for v in got if 200 <= v.status < 300}
        missing = len(set(acked) - done)
        if not missing:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{missing} of {len(acked)} never answered 2xx")
        time.sleep(0.2)


def push_stats(client: Client, topic: str, group: str) -> list[PushStats]:
    """The group's ``PushStats`` on each shard whose master pushes it."""
    return [
        g.push
        for shard in client.stats(topic).shards
        for t in shard.topics
        if t.topic == topic
        for g in t.groups
        if g.group == group and g.push is not None
    ]


class PushLoad:
    """Batches of ``batch`` messages of ``topic`` scheduled every ``every_s`` from a
    thread through a routing client of ``address`` (any node), each due
    ``ahead_ms`` after its call, until ``stop``; ``acked``: id -> due time of every
    acknowledged message; ``errors``: calls that failed after the client's retries
    (their messages not owed: not acknowledged)."""

    def __init__(
        self, address: str, topic: str = "t", *, batch: int = 20, every_s: float = 0.05,
        ahead_ms: int = 1000,
    ) -> None:  # fmt: skip
        self.address, self.topic = address, topic
        self.batch, self.every_s, self.ahead_ms = batch, every_s, ahead_ms
        self.acked: dict[str, int] = {}
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="push-load", daemon=True)

    def start(self) -> PushLoad:
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        """Stop scheduling; the acknowledged ids -> due times."""
        self._stop.set()
        self._thread.join(120)
        return dict(self.acked)

    def _run(self) -> None:
        retry = RetryPolicy(attempts=20, base_s=0.05, max_s=0.5)
        with Client(self.address, retry=retry) as c:
            while not self._stop.is_set():
                try:
                    schedule_spread(c, self.topic, self.batch, first_ms=self.ahead_ms,
                                    step_ms=1, acked=self.acked)  # fmt: skip
                except Exception as exc:  # a failover the retries did not ride out
                    self.errors[type(exc).__name__] += 1
                self._stop.wait(self.every_s)
