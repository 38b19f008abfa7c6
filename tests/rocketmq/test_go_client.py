"""delayq's RocketMQ port against the official RocketMQ 5 Go client (v5.1.4, pinned in
``go/go.mod``, driven by ``go/main.go`` through ``goclient``): NORMAL and DELAY messages
from a Producer reach a SimpleConsumer with their body, tag, keys and properties, DELAY
ones never before due; an empty poll is an empty answer, not an error (the Go client
fails a receive on any status but OK); a recall before due cancels the message, one
after delivery is refused. Timing is asserted only as "never before due" and generous
upper bounds. The first tests need no server: the driver's arguments, and a prompt,
clear failure against a closed port.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.rocketmq.goclient import DriverFailed, Drivers
from tests.rocketmq.javaclient import of, sent_by_id

pytestmark = pytest.mark.timeout(600)  # the first test may build the driver (minutes, cold)

DELAY_MS = 2500
LATE_MS = 10_000
"""How late after its delivery timestamp a message may arrive: generous, not a target."""
AWAIT = ("--await-ms", "1000")
"""The consumer's await duration: an empty receive ends after it (the client sends no
long_polling_timeout; delayq leaves the request timeout its Settings declare free), so
lingering consumers end soon."""


def _name(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def test_the_driver_prints_its_usage_and_refuses_bad_arguments(go_client: Path) -> None:
    def driver(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([go_client, *args], capture_output=True, text=True, timeout=60)

    usage = driver("--help")
    assert usage.returncode == 0, usage.stderr
    for scenario in ("produce", "recall", "simple-consume"):
        assert f"  {scenario} " in usage.stdout
    for args, why in [
        ((), "a scenario is required"),
        (("produce", "--topic", "t"), "--endpoint is required"),
        (("teleport", "--endpoint", "127.0.0.1:1", "--topic", "t"), "unknown scenario: teleport"),
        (("produce", "--endpoint", "127.0.0.1:1", "--topic", "t", "--delay", "x"), "invalid"),
        (("produce", "--endpoint", "127.0.0.1:1", "--topic", "t", "--prop", "x"), "KEY=VALUE"),
        (("simple-consume", "--endpoint", "127.0.0.1:1", "--topic", "t"), "--group is required"),
    ]:
        done = driver(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert why in done.stderr
        assert done.stdout == ""  # stdout is for JSON lines only


def test_a_closed_port_fails_promptly_and_clearly(
    go_drivers_for: Callable[[str], Drivers],
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    began = time.monotonic()
    with pytest.raises(DriverFailed) as failed:
        go_drivers_for(closed).run("produce", "orders", deadline_s=60)
    assert failed.value.returncode == 1, failed.value  # a failed call, not the deadline
    (error,) = of(failed.value.events, "error")
    assert error["phase"] == "start" and "route" in error["message"], error
    assert time.monotonic() - began < 45  # the client's dial timeout (5 s), no hang


# --- against delayq's RocketMQ port --------------------------------------------------


def test_normal_and_delay_messages_reach_a_simple_consumer_never_early(go: Drivers) -> None:
    topic = _name("orders")
    consuming = go.start("simple-consume", topic, "--group", "billing", "--count", "4", *AWAIT)
    consuming.wait_for("started")
    sent = go.run(
        "produce", topic, "--normal", "2", "--delay", "2", "--delay-ms", str(DELAY_MS),
        "--tag", "invoice", "--keys", "k1,k2", "--prop", "region=eu", "--prop", "tier=2",
    )  # fmt: skip
    got = consuming.result()

    sends = sent_by_id(sent)
    assert [s["kind"] for s in sends.values()] == ["normal"] * 2 + ["delay"] * 2, sent
    assert all(s["recall_handle"] for s in sends.values() if s["kind"] == "delay")
    received = of(got, "received")
    assert sorted(r["message_id"] for r in received) == sorted(sends)  # each once, client ids
    assert sorted(e["message_id"] for e in of(got, "acked")) == sorted(sends)
    for r in received:
        s = sends[r["message_id"]]
        assert r["body"] == f"m-{s['kind']}-{s['index']}"
        assert r["topic"] == topic
        assert r["tag"] == "invoice"
        assert sorted(r["keys"]) == ["k1", "k2"]
        assert r["properties"] == {"region": "eu", "tier": "2"}
        assert r["attempt"] == 1
        if s["kind"] == "delay":
            assert r["delivery_ms"] == s["due_ms"]
            assert r["ms"] >= s["due_ms"], f"received {s['due_ms'] - r['ms']} ms before due"
            assert r["ms"] <= s["due_ms"] + LATE_MS
    assert got[-1]["event"] == "done" and got[-1]["received"] == 4


def test_an_empty_poll_is_an_empty_answer_not_an_error(go: Drivers) -> None:
    got = go.run(
        "simple-consume", _name("quiet"), "--group", "idle", "--count", "0",
        "--linger-ms", "1000", *AWAIT,
    )  # fmt: skip
    assert of(got, "empty") and not of(got, "received") and not of(got, "error"), got
    assert got[-1]["event"] == "done"


def test_a_message_recalled_before_due_is_never_delivered(go: Drivers) -> None:
    topic = _name("recall")
    recall = go.run("recall", topic, "--delay-ms", str(DELAY_MS))
    (recalled,) = of(recall, "sent")
    assert recalled["recall_handle"], "a DELAY message's receipt carries a recall handle"
    (answer,) = of(recall, "recalled")
    assert answer["message_id"] == recalled["message_id"]  # the client's own id, as RocketMQ
    control = go.run("produce", topic, "--normal", "1", "--delay", "0")

    # the control message, then watch until past the recalled message's due time
    linger_ms = max(0, recalled["due_ms"] + 1000 - int(time.time() * 1000))
    got = go.run(
        "simple-consume", topic, "--group", "billing", "--linger-ms", str(linger_ms), *AWAIT
    )
    assert [r["message_id"] for r in of(got, "received")] == list(sent_by_id(control))
    assert got[-1]["ms"] >= recalled["due_ms"], "the consumer watched past the due time"


def test_a_recall_after_delivery_is_refused(go: Drivers) -> None:
    topic = _name("late-recall")
    (sent,) = of(
        go.run("produce", topic, "--normal", "0", "--delay", "1", "--delay-ms", "500"), "sent"
    )
    got = go.run("simple-consume", topic, "--group", "billing", *AWAIT)
    assert [r["message_id"] for r in of(got, "received")] == [sent["message_id"]]
    with pytest.raises(DriverFailed) as failed:
        go.run("recall", topic, "--handle", sent["recall_handle"])
    (error,) = of(failed.value.events, "error")
    assert error["phase"] == "recall" and error["code"] not in (None, 20000), error
