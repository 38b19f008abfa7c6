"""delayq's RocketMQ port against the official RocketMQ 5 Java client (5.2.0, driven by
``java/ClientDriver.java``): NORMAL and DELAY messages through a Producer (with and
without declared topics, one by one and all in flight), a SimpleConsumer (ack,
invisibility that lapses, changeInvisibleDuration) and a PushConsumer (retries), and
recall; a send whose answer was lost (``lossyserve``), retried by the client and
stored once. Timing is asserted only as "never before due" (an early delivery is a bug) and
generous upper bounds. The first tests need no server: the driver's arguments, and a
clear, prompt failure against a closed port.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from bench.peers.javabuild import JavaBuild

import delayq
from delayq.rocketmq.handles import recalled
from tests.rocketmq import javaclient, lossyserve
from tests.rocketmq.javaclient import DriverFailed, Drivers, Event, of, sent_by_id
from tests.support.servers import ServerProcess

TOPIC = "orders"
GROUP = "billing"
DELAY_MS = 3000
LATE_MS = 10_000
"""How late after its delivery timestamp a message may arrive: generous, not a target."""
INVISIBLE_MS = 10_000  # the smallest invisible time RocketMQ's proxy accepts
SLACK_MS = 1000
"""What a client-side stamp may trail the server's by (the reply's way back, under load)."""


# --- the driver alone --------------------------------------------------------------


def _java(build: JavaBuild, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = javaclient.command(build, tmp_path, *args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_the_driver_prints_its_usage_and_refuses_bad_arguments(
    java_client: JavaBuild, tmp_path: Path
) -> None:
    usage = _java(java_client, tmp_path, "--help")
    assert usage.returncode == 0, usage.stderr
    for scenario in ("produce", "recall", "keep-producing", "simple-consume", "push-consume"):
        assert f"  {scenario} " in usage.stdout
    for args, why in [
        ((), "usage:"),
        (("produce", "--topic", "t"), "--endpoint is required"),
        (("teleport", "--endpoint", "127.0.0.1:1", "--topic", "t"), "unknown scenario: teleport"),
        (
            ("produce", "--endpoint", "127.0.0.1:1", "--topic", "t", "--delay", "x"),
            "takes a number",
        ),
        (("simple-consume", "--endpoint", "127.0.0.1:1", "--topic", "t"), "--group is required"),
    ]:
        done = _java(java_client, tmp_path, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert why in done.stderr
        assert done.stdout == ""  # stdout is for JSON lines only


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(
    "scenario",
    [
        ["produce"],
        ["produce", "--no-topics"],
        ["recall"],
        ["simple-consume", "--group", GROUP],
        ["push-consume", "--group", GROUP],
    ],
    ids=" ".join,
)
def test_every_scenario_fails_promptly_and_clearly_against_a_closed_port(
    drivers_for: Callable[[str], Drivers], scenario: list[str]
) -> None:
    drivers: Drivers = drivers_for(_closed_port())
    began = time.monotonic()
    with pytest.raises(DriverFailed) as failed:
        drivers.run(scenario[0], TOPIC, *scenario[1:], deadline_s=60)
    assert failed.value.returncode == 1, failed.value  # a failed call, not the deadline
    assert "Connection refused" in str(failed.value)
    assert of(failed.value.events, "error"), "no error event on stdout"
    assert time.monotonic() - began < 45  # the client's own retries (~7-13 s), no hang


# --- against delayq's RocketMQ port --------------------------------------------------

PRODUCERS = {
    "declared topics": [],
    "no declared topics": ["--no-topics"],
    "all in flight": ["--async"],
}


def exchange(
    rocketmq: Drivers, consumer: list[str], *sends: list[str], deadline_s: float = 60
) -> tuple[list[list[Event]], list[Event]]:
    """Starts the ``consumer`` scenario (on TOPIC), runs each of ``sends`` once it is up,
    and gives their events and, when it has ended by itself, the consumer's."""
    consuming = rocketmq.start(consumer[0], TOPIC, *consumer[1:], deadline_s=deadline_s)
    consuming.wait_for("started")
    sent = [rocketmq.run(send[0], TOPIC, *send[1:]) for send in sends]
    return sent, consuming.result()


@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_normal_and_delay_messages_reach_a_simple_consumer_never_early(
    rocketmq: Drivers, producer: str
) -> None:
    (sent,), got = exchange(
        rocketmq,
        ["simple-consume", "--group", GROUP, "--count", "6"],
        [
            *("produce", "--normal", "3", "--delay", "3", "--delay-ms", str(DELAY_MS)),
            *("--tag", "invoice", "--keys", "k1,k2", "--prop", "region=eu", "--prop", "tier=2"),
            *PRODUCERS[producer],
        ],
    )
    sends = sent_by_id(sent)
    assert len(sends) == 6, sent
    received = of(got, "received")
    assert sorted(r["message_id"] for r in received) == sorted(sends)  # each once
    for r in received:
        s = sends[r["message_id"]]
        assert r["body"] == f"m-{s['kind']}-{s['index']}"
        assert r["topic"] == TOPIC
        assert r["tag"] == "invoice"
        assert sorted(r["keys"]) == ["k1", "k2"]
        assert {"region": "eu", "tier": "2"}.items() <= r["properties"].items()
        assert r["attempt"] == 1
        if s["kind"] == "delay":
            assert r["delivery_ms"] == s["due_ms"]
            assert r["ms"] >= s["due_ms"], f"received {s['due_ms'] - r['ms']} ms before due"
            assert r["ms"] <= s["due_ms"] + LATE_MS


def test_a_message_recalled_before_due_is_never_delivered(rocketmq: Drivers) -> None:
    (recall, control), got = exchange(
        rocketmq,
        # until the control message, sent after the recall, and 4 s more: past the
        # recalled message's due time however long the producers' JVMs take to start
        ["simple-consume", "--group", GROUP, "--count", "1", "--linger-ms", "4000"],
        ["recall", "--delay-ms", str(DELAY_MS)],
        ["produce", "--normal", "1", "--delay", "0"],
        deadline_s=90,
    )
    (recalled,) = of(recall, "sent")
    assert recalled["recall_handle"], "a DELAY message's receipt carries a recall handle"
    assert of(recall, "recalled")[0]["message_id"] == recalled["message_id"]
    received = [r["message_id"] for r in of(got, "received")]
    assert received == list(sent_by_id(control))  # the control message, and only it
    assert got[-1]["ms"] >= recalled["due_ms"] + 3000  # the consumer watched past the due time


def test_an_unacked_message_comes_back_with_attempt_2_once_its_invisibility_lapses(
    rocketmq: Drivers,
) -> None:
    (sent,), got = exchange(
        rocketmq,
        [
            *("simple-consume", "--group", GROUP, "--mode", "lapse", "--count", "2"),
            *("--invisible-ms", str(INVISIBLE_MS), "--linger-ms", "3000"),
        ],
        ["produce", "--normal", "2", "--delay", "0"],
    )
    (kept,) = [e["message_id"] for e in of(got, "kept")]
    (other,) = set(sent_by_id(sent)) - {kept}
    again = [r for r in of(got, "received") if r["message_id"] == kept]
    assert [r["attempt"] for r in again] == [1, 2]
    assert again[1]["ms"] - again[0]["ms"] >= INVISIBLE_MS - SLACK_MS, "back while invisible"
    # acked at the same time the kept one was left: the ack removed it for good
    assert [r["attempt"] for r in of(got, "received") if r["message_id"] == other] == [1]
    assert {e["message_id"] for e in of(got, "acked")} == {kept, other}


def test_change_invisible_duration_then_ack_removes_the_message(rocketmq: Drivers) -> None:
    (sent,), got = exchange(
        rocketmq,
        [
            *("simple-consume", "--group", GROUP, "--mode", "change", "--count", "2"),
            *("--invisible-ms", str(INVISIBLE_MS), "--change-ms", str(INVISIBLE_MS)),
            *("--linger-ms", str(INVISIBLE_MS + 2000)),  # past both invisible times
        ],
        ["produce", "--normal", "2", "--delay", "0"],
    )
    ids = sorted(sent_by_id(sent))
    assert sorted(r["message_id"] for r in of(got, "received")) == ids  # none came back
    assert sorted(e["message_id"] for e in of(got, "changed")) == ids
    assert sorted(e["message_id"] for e in of(got, "acked")) == ids


def test_a_push_consumer_gets_every_message_and_retries_the_failed_one(rocketmq: Drivers) -> None:
    (good, bad), got = exchange(
        rocketmq,
        ["push-consume", "--group", GROUP, "--count", "3", "--failures", "2"],
        ["produce", "--normal", "2", "--delay", "1", "--delay-ms", str(DELAY_MS)],
        ["produce", "--normal", "1", "--delay", "0", "--body", "fail"],
        deadline_s=90,
    )
    consumed = of(got, "consumed")
    for message_id, s in sent_by_id(good).items():
        (c,) = [c for c in consumed if c["message_id"] == message_id]
        assert c["result"] == "SUCCESS"
        if s["kind"] == "delay":
            assert c["ms"] >= s["due_ms"], f"consumed {s['due_ms'] - c['ms']} ms before due"
            assert c["ms"] <= s["due_ms"] + LATE_MS
    (failing,) = sent_by_id(bad)
    tries = [c for c in consumed if c["message_id"] == failing]
    assert [c["result"] for c in tries] == ["FAILURE"] * len(tries)
    assert [c["attempt"] for c in tries][:2] == [1, 2]  # retried, each time counted


DLQ_GROUP = "dlq-group"
"""A group with two delivery attempts (the server's --max-delivery-attempts)."""


def test_a_push_consumers_failing_message_goes_to_the_dead_letter_topic(
    start_server: Callable[..., ServerProcess], drivers_for: Callable[[str], Drivers]
) -> None:
    """The group's two attempts fail; the client forwards the message to
    %DLQ%<group> (its Settings said two), where another group receives it."""
    server = start_server(
        "--rocketmq-listen", "127.0.0.1:0", "--max-delivery-attempts", f"16 {DLQ_GROUP}=2"
    )
    rocketmq = drivers_for(server.rocketmq_address)
    (_, bad), got = exchange(
        rocketmq,
        ["push-consume", "--group", DLQ_GROUP, "--count", "1", "--failures", "2",
         "--linger-ms", "3000"],
        ["produce", "--normal", "1", "--delay", "0"],
        ["produce", "--normal", "1", "--delay", "0", "--body", "fail"],
        deadline_s=90,
    )  # fmt: skip
    (failing,) = sent_by_id(bad)
    tries = [c for c in of(got, "consumed") if c["message_id"] == failing]
    assert [(c["attempt"], c["result"]) for c in tries] == [(1, "FAILURE"), (2, "FAILURE")]
    dead = rocketmq.run("simple-consume", f"%DLQ%{DLQ_GROUP}", "--group", "ops", "--count", "1")
    (r,) = of(dead, "received")
    assert (r["message_id"], r["body"]) == (failing, "fail-normal-0")


def test_a_send_whose_answer_was_lost_is_retried_and_stored_once(
    tmp_path: Path, drivers_for: Callable[[str], Drivers]
) -> None:
    """The server stores the first send and loses its answer (``lossyserve``: the call
    fails UNAVAILABLE); the client resends with the same message id, and the port's
    dedup window answers the resend with the first message: one message pending."""
    server = ServerProcess(
        tmp_path / "data",
        ["--rocketmq-listen", "127.0.0.1:0", "--grpc-server", "grpcio"],
        prefix=[sys.executable, "-m", "tests.rocketmq.lossyserve"],
    ).start()
    try:
        sent = drivers_for(server.rocketmq_address).run(
            "produce", TOPIC, "--normal", "0", "--delay", "1", "--delay-ms", "3600000"
        )
        assert lossyserve.LOST in server.logs()  # the first answer was lost, and resent
        (one,) = sent_by_id(sent).values()
        with delayq.Client(server.address) as client:
            topic = client.stats(TOPIC).topic(TOPIC)
            assert topic is not None and topic.pending == 1
            assert client.lookup(recalled(one["recall_handle"], TOPIC).id).body == b"m-delay-0"
    finally:
        server.stop()
