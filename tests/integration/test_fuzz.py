"""Fuzzing a real ``delayq serve`` process: random and malformed requests on every
method of the public, the admin and the RocketMQ 5 service (``tests/integration/hostile.py``:
garbage, truncated messages, invalid UTF-8, extreme numbers, oversized fields,
forged ids and receipts). Every answer must be a proper status (never UNKNOWN
or INTERNAL) within its deadline, a request that cannot decode must be
INVALID_ARGUMENT, the server must keep serving and log no traceback, and a
message scheduled before the fuzzing must be delivered after it.

The number of random requests: 300 (well under a minute), 3000 with ``--long``,
or ``DELAYQ_FUZZ_EXAMPLES``. The counts per status are printed.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from delayq import Client
from tests.integration.hostile import (
    PROTECTED_GROUP,
    Method,
    Payload,
    call_raw,
    fixed_cases,
    methods,
    payloads,
)
from tests.support.servers import ServerProcess
from tests.support.sizes import size

EXAMPLES = size("DELAYQ_FUZZ_EXAMPLES", ci=300, long=3000)
TIMEOUT_S = 5.0  # a call's deadline
LONG_POLL_TIMEOUT_S = 0.3  # Receive and Subscribe may wait for messages until then
SLACK_S = 2.0  # beyond its deadline, how late a call may end (a busy machine)
PROPER = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,  # a body of 300 KiB in a batch of them: the size limit
}
MAX_REQUEST = 64 << 20


def judge(
    channel: grpc.Channel,
    method: Method,
    payload: Payload,
    seen: collections.Counter[tuple[str, str]],
) -> None:
    timeout = LONG_POLL_TIMEOUT_S if method.long_poll else TIMEOUT_S
    code, details, took = call_raw(channel, method, payload.data, timeout)
    seen[method.name, code.name] += 1
    what = f"{method.name} {payload.kind} {payload.data[:80]!r}: {code.name} {details[:200]!r}"
    assert took <= timeout + SLACK_S, f"hung {took:.1f} s: {what}"
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        assert method.long_poll, f"no answer within the deadline: {what}"
        return
    assert code in PROPER, what
    assert len(details) < 1000, f"a long error text: {what}"
    if payload.undecodable:
        assert code is grpc.StatusCode.INVALID_ARGUMENT, what
        assert f"is not a valid {method.package} message" in details, what
        if payload.kind == "bad-utf8":
            assert "not valid UTF-8" in details, what


@pytest.mark.long
def test_fuzzed_requests_get_proper_statuses_and_the_server_keeps_delivering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = ServerProcess(tmp_path / "data", ["--rocketmq-listen", "127.0.0.1:0"]).start()
    every = methods()
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    try:
        with Client(srv.address) as c:
            canary = c.schedule("canary", b"before the fuzz", delay=1.0)
        canary_id = canary.id.encode()
        started = time.monotonic()
        options = [("grpc.max_send_message_length", MAX_REQUEST * 2)]
        with (
            grpc.insecure_channel(srv.address, options=options) as channel,
            grpc.insecure_channel(srv.admin_address, options=options) as admin,
            grpc.insecure_channel(srv.rocketmq_address, options=options) as rocketmq,
        ):
            port = {"public": channel, "admin": admin, "rocketmq": rocketmq}  # Method.port
            for method in every:
                for payload in fixed_cases(method):
                    judge(port[method.port], method, payload, seen)
            oversized = Payload("valid", b"\x0a" + b"\x80\x80\x80\x20" + bytes(MAX_REQUEST))
            code, _, _ = call_raw(channel, every[0], oversized.data, TIMEOUT_S)
            assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, "over the server's size limit"
            seen[every[0].name, code.name] += 1
            stats = next(m for m in every if m.name == "Stats")
            # 16 M tiny fields, then a topic that is not UTF-8: refused within the deadline
            slow = Payload("broken", b"\x08\x01" * (16 << 20) + b"\x0a\x01\xff")
            judge(channel, stats, slow, seen)

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=[
                    HealthCheck.too_slow,
                    HealthCheck.data_too_large,
                    HealthCheck.filter_too_much,
                ],
            )
            @given(data=st.data())
            def fuzz(data: st.DataObject) -> None:
                method = data.draw(st.sampled_from(every), label="method")
                payload = data.draw(payloads(method), label="payload")
                assume(canary_id not in payload.data)  # a forged id may name it: not cancelled
                judge(port[method.port], method, payload, seen)

            fuzz()
        fuzzed_s = time.monotonic() - started
        assert srv.proc is not None and srv.proc.poll() is None, "the server died"
        with Client(srv.address) as c:
            got = []
            until = time.monotonic() + 15
            while not got and time.monotonic() < until:
                got = [
                    m
                    for m in c.receive("canary", PROTECTED_GROUP, max_messages=100, wait_s=1)
                    if m.id == canary.id
                ]
            assert got and got[0].body == b"before the fuzz", "the canary was not delivered"
            assert c.lookup(canary.id).state == "delivered"
        logs = srv.logs()
        assert "Traceback" not in logs and '"level": "error"' not in logs, logs[-3000:]
        refusals = logs.count("refused undecodable requests")
        assert 1 <= refusals <= 1 + fuzzed_s / 60 + 1, "logged at most once a minute"
    finally:
        srv.stop()
    with capsys.disabled():
        print(summary(seen, fuzzed_s))


def summary(seen: collections.Counter[tuple[str, str]], took_s: float) -> str:
    """Requests per status, then per method and status."""
    by_code: collections.Counter[str] = collections.Counter()
    by_method: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for (method, code), n in seen.items():
        by_code[code] += n
        by_method[method][code] += n
    lines = [f"\nfuzz: {sum(by_code.values())} requests in {took_s:.1f} s"]
    lines += [f"  {code:<20} {n}" for code, n in by_code.most_common()]
    lines += [
        f"  {method:<20} " + ", ".join(f"{code} {n}" for code, n in codes.most_common())
        for method, codes in sorted(by_method.items())
    ]
    return "\n".join(lines)
