"""Push delivery end to end: one real ``delayq serve`` (``--push-allow
127.0.0.1/32``, a ``--push-secret-dir``) pushing to a real receiver process
(``tests/support/push_receiver.py``), whose verdicts are the evidence:

- a load: every acknowledged message arrives, none before its due time, every
  signature verified by the Standard Webhooks library, duplicates counted;
- a receiver answering 500 for a while, then 200: everything arrives, and a
  message's attempts are never closer than its group's backoff;
- 429 with ``Retry-After: 5``: no request to the target in the 5 s after;
- the receiver down, then back on its port: the backlog drained, first attempts
  in due order;
- refused targets: 127.0.0.1 without the allow-list and 169.254.169.254 at set,
  ``localhost`` (a name resolving to loopback) at connect, nothing sent;
- neither the secret nor the URL's query ever shows in the node's log or Stats.

Sizes: ``tests/support/sizes.py`` (``--long`` for the issue's numbers).
"""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from delayq import Backoff, BackoffKind, Client, GroupPolicy, Jitter, PushTarget
from delayq.client import InvalidArgument
from tests.support.cluster import delayq_cli
from tests.support.pushing import (
    Receiver,
    check_verdicts,
    push_stats,
    schedule_spread,
    secret,
    wait_arrived,
    write_secret,
)
from tests.support.servers import ServerProcess
from tests.support.sizes import size

LOAD = size("DELAYQ_PUSH_LOAD", ci=2000, long=10_000)
FAILING_S = size("DELAYQ_PUSH_FAILING_S", ci=5, long=20)
DOWN_S = size("DELAYQ_PUSH_DOWN_S", ci=5, long=30)
ALLOW = ("--push-allow", "127.0.0.1/32")
BACKOFF = Backoff(kind=BackoffKind.EXPONENTIAL, initial_ms=500, multiplier=2, max_ms=2000,
                  jitter=Jitter.NONE)  # fmt: skip
"""No jitter: each retry waits exactly its delay, which the receiver can check."""


def _backoff_ms(failed: int) -> int:
    """``BACKOFF``'s wait after ``failed`` attempts (``delivery.policy.Backoff``'s rule)."""
    grown = BACKOFF.initial_ms * BACKOFF.multiplier ** (failed - 1)
    return int(min(grown, BACKOFF.max_ms))

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def secret_dir(tmp_path: Path) -> Path:
    d = tmp_path / "secrets"
    d.mkdir()
    return d


@pytest.fixture
def server(tmp_path: Path, secret_dir: Path) -> Iterator[ServerProcess]:
    node = ServerProcess(tmp_path / "data", [*ALLOW, "--push-secret-dir", str(secret_dir)])
    node.start()
    try:
        yield node
    finally:
        node.stop()


def _push(c: Client, rx: Receiver, group: str, **policy: object) -> None:
    target = PushTarget(url=rx.url(), secret_ref=str(policy.pop("secret_ref", "")))
    c.set_group_policy("t", group, GroupPolicy(push=target, **policy))


def test_a_load_arrives_whole_on_time_and_signed(
    tmp_path: Path, server: ServerProcess, secret_dir: Path
) -> None:
    key = secret()
    write_secret(secret_dir, "hooks", key)
    with Receiver(tmp_path / "rx", secrets=[key]) as rx, Client(server.address) as c:
        url = rx.url("/hook?token=query-never-shown")
        c.set_group_policy("t", "hooks", GroupPolicy(push=PushTarget(url=url, secret_ref="hooks")))
        acked = schedule_spread(c, "t", LOAD, first_ms=2000, step_ms=2000 / LOAD * 2)
        got = wait_arrived(rx, acked, timeout_s=120 + LOAD / 50)
        counts = check_verdicts(acked, got)
        print(counts.line())
        assert (counts.lost, counts.early, counts.unverified, counts.unexpected) == (0, 0, 0, 0)
        assert all(v.verified and v.sig_count == 1 for v in got)
        assert {v.topic for v in got} == {"t"}
        deadline = time.monotonic() + 10  # the pushers' reports are made at each 0.25 s look
        while (stats := push_stats(c, "t", "hooks")[0]).requests["2xx"] < LOAD:
            assert time.monotonic() < deadline, stats
            time.sleep(0.1)
        assert stats.last_success_ms > 0
        assert stats.target == f"http://127.0.0.1:{rx.port}"
        shown = delayq_cli("stats", "--server", server.address, "--shards", "--json", "t")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)  # (parses)
    for text in (server.logs(), shown.stdout):
        assert key not in text and key.removeprefix("whsec_") not in text
        assert "query-never-shown" not in text


def test_a_failing_receiver_gets_everything_once_it_answers_and_backoff_is_kept(
    tmp_path: Path, server: ServerProcess
) -> None:
    plan = [{"status": 500, "for_s": FAILING_S}, {"status": 200}]
    with Receiver(tmp_path / "rx", plan=plan) as rx, Client(server.address) as c:
        _push(c, rx, "g", backoff=BACKOFF, max_attempts=0)
        acked = schedule_spread(c, "t", 50, first_ms=500, step_ms=20)
        got = wait_arrived(rx, acked, timeout_s=120 + FAILING_S)
    counts = check_verdicts(acked, got)
    print(counts.line())
    assert (counts.lost, counts.early, counts.unexpected) == (0, 0, 0)
    assert any(v.status == 500 for v in got), "the plan's failing phase was never met"
    by_id = defaultdict(list)
    for v in got:
        by_id[v.id].append(v)
    for tries in by_id.values():
        tries.sort(key=lambda v: v.at_ms)
        for before, after in itertools.pairwise(tries):
            assert before.status == 500  # nothing after a 2xx but duplicates
            assert after.attempt == (before.attempt or 0) + 1
            # the nack came after the answer, due its backoff after it
            wait = _backoff_ms(before.attempt or 1)
            assert after.at_ms - before.at_ms >= wait, (before, after)


def test_retry_after_holds_the_whole_target(tmp_path: Path, server: ServerProcess) -> None:
    plan = [{"status": 429, "retry_after": "5", "count": 1}, {"status": 200}]
    with Receiver(tmp_path / "rx", plan=plan) as rx, Client(server.address) as c:
        _push(c, rx, "g", max_in_flight=1)  # one request at a time: none already under way
        acked = schedule_spread(c, "t", 5, first_ms=500, step_ms=10)
        got = wait_arrived(rx, acked, timeout_s=60)
    first, *rest = sorted(got, key=lambda v: v.at_ms)
    assert first.status == 429
    assert rest and all(v.at_ms >= first.at_ms + 5000 for v in rest), [
        v.at_ms - first.at_ms for v in rest
    ]
    again = [v for v in rest if v.id == first.id]
    assert again and again[0].attempt == 2  # the held message came back, its attempt counted
    assert check_verdicts(acked, got).lost == 0


def test_a_receiver_down_then_back_gets_the_backlog_in_due_order(
    tmp_path: Path, server: ServerProcess
) -> None:
    rx = Receiver(tmp_path / "rx").start()
    try:
        with Client(server.address) as c:
            _push(c, rx, "g", backoff=BACKOFF, max_attempts=0, max_in_flight=1)
            rx.stop()  # down before anything is due
            acked = schedule_spread(c, "t", 100, first_ms=500, step_ms=20)
            time.sleep(DOWN_S)  # (the outage: requests fail to connect meanwhile)
            stats = push_stats(c, "t", "g")
            rx.start()  # back on its port
            got = wait_arrived(rx, acked, timeout_s=120)
    finally:
        rx.stop()
    assert stats and stats[0].requests.get("connect", 0) >= 1, stats
    counts = check_verdicts(acked, got)
    print(counts.line())
    assert (counts.lost, counts.early, counts.unexpected) == (0, 0, 0)
    firsts = [v for v in sorted(got, key=lambda v: v.at_ms) if v.attempt == 1]
    assert len(firsts) > 50  # the circuit kept most of the backlog untried
    dues = [acked[v.id] for v in firsts]
    assert dues == sorted(dues), "first attempts out of due order"


def test_refused_targets(tmp_path: Path) -> None:
    plain = ServerProcess(tmp_path / "plain").start()  # no --push-allow
    try:
        with Receiver(tmp_path / "rx") as rx, Client(plain.address) as c:
            for url in (rx.url(), "http://169.254.169.254/latest/meta-data/"):
                with pytest.raises(InvalidArgument, match=r"policy\.push\.url"):
                    c.set_group_policy("t", "g", GroupPolicy(push=PushTarget(url=url)))
            # a name that resolves to loopback: judged at connect, nothing sent
            by_name = f"http://localhost:{rx.port}/hook"
            c.set_group_policy("t", "n", GroupPolicy(push=PushTarget(url=by_name)))
            c.schedule("t", b"x", delay=0)
            deadline = time.monotonic() + 30
            while not any(s.state == "refused" for s in push_stats(c, "t", "n")):
                assert time.monotonic() < deadline, push_stats(c, "t", "n")
                time.sleep(0.2)
            (stats,) = push_stats(c, "t", "n")
            assert stats.requests.get("refused", 0) >= 1 and stats.requests.get("2xx", 0) == 0
            assert rx.verdicts() == []
    finally:
        plain.stop()
    # the metadata address stays refused under an allow-list of loopback
    allowing = ServerProcess(tmp_path / "allowing", list(ALLOW)).start()
    try:
        with Client(allowing.address) as c:
            meta = PushTarget(url="http://169.254.169.254/latest/meta-data/")
            with pytest.raises(InvalidArgument, match=r"policy\.push\.url"):
                c.set_group_policy("t", "g", GroupPolicy(push=meta))
    finally:
        allowing.stop()
