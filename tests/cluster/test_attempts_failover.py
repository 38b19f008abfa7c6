"""Attempt counts survive failovers and a rebalance, on real ``delayq serve``
processes under the supervisor: a 1-shard cluster of 3 nodes whose group ``g``
has ``max_attempts`` 4 (set through the client), messages never acked.

- Messages due at once (``early``) are handed out on shard 0; its master is
  SIGKILLed after their first attempt, ``delayq cluster scale --shards 2`` runs
  after their second (a delivered message stays on its shard with its attempts:
  only pending ones move), and shard 0's master is SIGKILLed again after their
  third.
- Messages pending during the rebalance whose keys the 2-shard map gives to the
  new shard 1 (``moved``) move there and, due once moved, are handed out there
  from attempt 1 under the same policy (the driver copied it to the new shard:
  ``delayq.control.policyspread``); shard 1's master is SIGKILLed after their
  first attempt.

Sync replication (``--min-insync 2``): every message is handed out exactly
``max_attempts`` times, attempts 1..4 each once, and reaches ``dlq.g`` with 4
attempts. Async replication (docs/replication.md): a failover may lose the
hand-outs the new master had not streamed yet, so a message may be handed out
again with the attempt it had, but only as its first hand-out after a kill (a
message's hand-outs are a second apart or more, longer than the stream lags
here, so a kill loses one of them at most); an attempt is never skipped, none
goes past 4, and every message still reaches ``dlq.g`` with 4 attempts.
The attempts per message are printed (``-s``). Each kill of a master is the
shard failing over: ``_kill_master``."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from delayq import shardmap
from delayq.client import Client, GroupPolicy, Outgoing
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as rpc
from tests.cluster.test_supervisor_failover import FAST
from tests.support.cluster import LocalCluster, cluster_cli

pytestmark = pytest.mark.timeout(300)

ATTEMPTS = 4
EARLY = 4
MOVED = 3
INVISIBLE_S = 1.0
GIVE_UP_S = 200.0

Seen = dict[bytes, list[tuple[int, int]]]
"""Per message (its body): each hand-out's (attempt, kills of its shard before it)."""


def _kill_master(c: LocalCluster, shard: int) -> None:
    """The shard's master lost: silent (SIGSTOP) until the shard has failed over,
    then SIGKILLed; returns once the killed node is back in sync (the supervisor
    restarts it as a replica). A SIGKILL alone may not fail the shard over: the
    supervisor may restart the dead master in place before its lease runs out
    (``tests/spark/test_rebalance_failover.py``), and the failover this test is
    about never happens."""
    before = c.record(shard)
    pid = c.node_pid(shard, int(before["master"].removeprefix("node-")))
    os.kill(pid, signal.SIGSTOP)
    try:
        c.wait_record(shard, lambda r: r["epoch"] > before["epoch"], timeout_s=60)
    finally:
        os.kill(pid, signal.SIGKILL)
    c.wait_insync(shard, 3, timeout_s=60)


def _receive(
    address: str, topic: str, group: str, auto_ack: bool = False
) -> list[pb.ReceivedMessage]:
    """One Receive at ``address`` (nothing when it does not answer: mid-failover,
    the next round asks the new master; a call that fails hands nothing out, and
    no call is in flight while a master is killed)."""
    request = pb.ReceiveRequest(
        topic=topic,
        group=group,
        wait_ms=300,
        invisible_ms=int(INVISIBLE_S * 1000),
        auto_ack=auto_ack,
    )
    with grpc.insecure_channel(address) as ch:
        try:
            return list(rpc.DelayQueueStub(ch).Receive(request, timeout=10).messages)
        except grpc.RpcError:
            return []


class Run:
    """The test's messages and what it saw of them."""

    def __init__(self, c: LocalCluster) -> None:
        self.c = c
        self.client = Client(c.address(0))
        self.seen: Seen = {}
        self.dead: dict[bytes, set[int]] = {}  # body -> dlq.attempts of its dead letters
        self.kills = [0, 0]
        self.early: list[bytes] = []
        self.moved: dict[bytes, str] = {}  # body -> id

    def schedule(self) -> None:
        self.client.set_group_policy("t", "g", GroupPolicy(max_attempts=ATTEMPTS))
        later = int(time.time() * 1000) + 3_600_000  # pending through the rebalance
        out = [Outgoing(topic="t", body=b"e%d" % i, key=f"e{i}") for i in range(EARLY)]
        keys = (k for i in range(1000) if shardmap.shard_of_key(k := f"m{i}", 2) == 1)
        out += [
            Outgoing(topic="t", body=k.encode(), key=k, at=later)
            for _, k in zip(range(MOVED), keys, strict=False)
        ]
        sent = self.client.schedule_many(out)
        assert all(s.ok and s.id for s in sent), sent
        self.early = [m.body for m in out[:EARLY]]
        self.moved = {m.body: str(s.id) for m, s in zip(out[EARLY:], sent[EARLY:], strict=True)}
        self.seen = {m.body: [] for m in out}

    def lowest(self, bodies: Iterator[bytes] | list[bytes]) -> int:
        return min(len(self.seen[b]) for b in bodies)

    def round(self) -> None:
        """One receive at each shard's master in turn (never acked: each message
        comes back once its invisibility lapses), and the dead letters so far
        (auto-acked). A shard at a time, each answer whole: no hand-out is left
        unseen in a fan-in's buffer while the test kills or scales."""
        for e in self.c.current_map().shards:
            for m in _receive(e.master, "t", "g"):
                shard = 0 if m.body in self.early else 1
                self.seen[m.body].append((m.attempt, self.kills[shard]))
            for m in _receive(e.master, "dlq.g", "audit", auto_ack=True):
                self.dead.setdefault(m.body, set()).add(int(m.headers["dlq.attempts"]))

    def kill(self, shard: int) -> None:
        _kill_master(self.c, shard)
        self.kills[shard] += 1

    def rebalance(self) -> None:
        """Scale to 2 shards; then a client on the new map, and the moved messages due."""
        run = cluster_cli("scale", "--dir", str(self.c.dir), "--shards", "2", timeout_s=300)
        assert run.returncode == 0, (run.stdout, run.stderr, self.c.logs())
        self.c.wait_insync(1, 3, timeout_s=60)
        self.client.close()
        self.client = Client(self.c.current_map().shards[0].master)
        now = int(time.time() * 1000)
        for mid in self.moved.values():
            self.client.reschedule(mid, at=now)

    def drive(self) -> None:
        """Rounds until every message is dead-lettered, with the kills and the
        rebalance between rounds of attempts (never while a receive is answered)."""
        scaled = False
        deadline = time.monotonic() + GIVE_UP_S
        while len(self.dead) < len(self.seen):
            assert time.monotonic() < deadline, f"seen {self.seen}, dead {self.dead}"
            self.round()
            if not scaled:
                if self.kills[0] == 0 and self.lowest(self.early) >= 1:
                    self.kill(0)
                elif self.kills[0] == 1 and self.lowest(self.early) >= 2:
                    self.rebalance()
                    scaled = True
                continue
            if self.kills[0] == 1 and self.lowest(self.early) >= 3:
                self.kill(0)
            if self.kills[1] == 0 and self.lowest(list(self.moved)) >= 1:
                self.kill(1)
        assert self.kills == [2, 1], self.kills
        print(
            "attempts per message:", {b.decode(): [a for a, _ in s] for b, s in self.seen.items()}
        )


@pytest.fixture
def run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Run]:
    monkeypatch.setenv("DELAYQ_SPARK_MASTER", "local[2]")  # the rebalance job's
    mode = request.param
    args = ("--replication", mode, *(("--min-insync", "2") if mode == "sync" else ()), *FAST)
    with LocalCluster(tmp_path / "c", shards=1, replicas=3, args=args) as c:
        c.wait_insync(0, 3)
        r = Run(c)
        try:
            yield r
        finally:
            r.client.close()


@pytest.mark.parametrize("run", ["sync"], indirect=True)
def test_attempts_continue_across_two_master_sigkills_and_a_rebalance(run: Run) -> None:
    run.schedule()
    run.drive()
    wanted = list(range(1, ATTEMPTS + 1))
    attempts = {b: [a for a, _ in s] for b, s in run.seen.items()}
    assert all(a == wanted for a in attempts.values()), f"attempts seen: {attempts}"
    assert run.dead == {b: {ATTEMPTS} for b in run.seen}, f"dead letters: {run.dead}"


@pytest.mark.parametrize("run", ["async"], indirect=True)
def test_async_repeats_an_attempt_only_after_a_kill_and_never_skips_one(run: Run) -> None:
    run.schedule()
    run.drive()
    for body, seen in run.seen.items():
        attempts = [a for a, _ in seen]
        assert attempts[0] == 1 and attempts[-1] == ATTEMPTS, (body, seen)
        assert sorted(set(attempts)) == list(range(1, ATTEMPTS + 1)), (body, seen)
        for (was, kills_before), (now, kills) in itertools.pairwise(seen):
            assert now in (was, was + 1), f"{body!r}: attempt {now} after {was}: {seen}"
            if now == was:  # the hand-out of ``was`` had not been streamed: lost
                assert kills > kills_before, f"{body!r}: attempt {now} again, no kill: {seen}"
    assert run.dead == {b: {ATTEMPTS} for b in run.seen}, f"dead letters: {run.dead}"
