"""The official RocketMQ 5 Python client (``rocketmq-python-client``, pinned in
``python/requirements.txt``) against a real ``delayq serve --rocketmq-listen``
process: a Producer's NORMAL and DELAY messages reach a SimpleConsumer with their
tag, keys and properties, DELAY ones never before their delivery time; a
recalled message is never received; an unacked message comes back once its
invisibility lapsed, as attempt 2.

The client runs as a subprocess in its own venv (``pyclient``). It sends delivery
timestamps in whole seconds, so every check of "not before" is against the
whole second the driver reports it sent (``delivery_timestamp_s``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.rocketmq import pyclient
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(300)  # the first test may make the venv (~45 s from PyPI)

LATE_MS = 3000
"""How late a due message may reach a consumer that is polling for it (loose: the
tests check order and presence, the benchmarks measure lateness)."""


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pyclient.ensure_venv()  # first: a cold build must not eat into a test's time
    data = tmp_path_factory.mktemp("rmq-python") / "data"
    server = ServerProcess(data, ["--rocketmq-listen", "127.0.0.1:0"]).start()
    try:
        assert server.rocketmq_address, "delayq serve printed no rocketmq address"
        yield server.rocketmq_address
    finally:
        server.stop()


def _name(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:10]}"


def _received(result: pyclient.DriverResult) -> list[dict[str, Any]]:
    return result.events("received")


def _consume(
    endpoint: str, topic: str, group: str, *args: str, deadline_s: float
) -> pyclient.RunningDriver:
    """A SimpleConsumer started now; ``.result()`` waits for its JSON lines."""
    return pyclient.start(
        "simple-consume", "--topic", topic, "--group", group, "--deadline-s", str(deadline_s),
        *args, endpoint=endpoint, timeout_s=deadline_s + 30,
    )  # fmt: skip


def test_producer_to_simple_consumer_normal_and_delay(endpoint: str) -> None:
    topic, group = _name("orders"), _name("g")
    exact = {"body": "exact", "tag": "other", "keys": ["x"], "properties": {"n": "1"}}
    with _consume(endpoint, topic, group, "--count", "6", deadline_s=30) as consumer:
        time.sleep(1)  # let it start polling: the DELAY checks need a consumer that waits
        sent = pyclient.run(
            "produce", "--topic", topic, "--normal", "3", "--delayed", "2", "--delay-s", "3",
            "--tag", "tg", "--key", "k1", "--key", "k2", "--property", "color=blue",
            "--message", json.dumps({**exact, "delay_s": 2}),
            endpoint=endpoint,
        ).events("sent")  # fmt: skip
        got = consumer.result()
    assert got.one("done")["complete"], got.report()

    assert [s["message_type"] for s in sent] == ["NORMAL"] * 3 + ["DELAY"] * 3
    by_id = {r["message_id"]: r for r in _received(got)}
    assert len(by_id) == len(_received(got)) == 6, "each message exactly once"
    assert set(by_id) == {s["message_id"] for s in sent}, "ids are the client's own"
    for s in sent:
        r = by_id[s["message_id"]]
        for field in ("topic", "tag", "keys", "properties", "body", "message_type"):
            assert r[field] == s[field], (field, s, r)
        assert r["delivery_attempt"] == 1 and r["acked"]
        assert not r["corrupted"], "the body digest must match (MD5, upper-case hex)"
    assert by_id[sent[0]["message_id"]]["properties"] == {"color": "blue"}
    assert by_id[sent[-1]["message_id"]]["tag"] == "other"

    delays = [s for s in sent if s["message_type"] == "DELAY"]
    normal_seen = min(by_id[s["message_id"]]["received_at_ms"] for s in sent[:3])
    first_due_ms = min(s["delivery_timestamp_s"] for s in delays) * 1000
    assert normal_seen < first_due_ms, "the consumer was polling before anything was due"
    for s in delays:
        r = by_id[s["message_id"]]
        due_ms = s["delivery_timestamp_s"] * 1000  # whole seconds: all this client sends
        assert r["delivery_timestamp_ms"] == due_ms
        assert due_ms <= r["received_at_ms"] < due_ms + LATE_MS, (s, r)


def test_a_recalled_message_is_never_received(endpoint: str) -> None:
    topic, group = _name("recall"), _name("g")
    recall = pyclient.run("recall", "--topic", topic, "--delay-s", "3", endpoint=endpoint)
    sent, recalled = recall.one("sent"), recall.one("recalled")
    assert sent["recall_handle"] and recalled["recall_handle"] == sent["recall_handle"]
    control = pyclient.run(
        "produce", "--topic", topic, "--normal", "1", "--delayed", "1", "--delay-s", "2",
        endpoint=endpoint,
    ).events("sent")  # fmt: skip

    # watch past the recalled one's due time; only the controls may come
    watch_s = sent["delivery_timestamp_s"] + 2 - time.time()
    got = _consume(endpoint, topic, group, deadline_s=watch_s).result()
    assert {r["message_id"] for r in _received(got)} == {c["message_id"] for c in control}


def test_a_recall_answers_with_the_clients_message_id(endpoint: str) -> None:
    """As RocketMQ does: its broker answers with the id the recall handle carries,
    the message's unique key, which is the id the client made and sent."""
    recall = pyclient.run("recall", "--topic", _name("recall-id"), endpoint=endpoint)
    assert recall.one("recalled")["message_id"] == recall.one("sent")["message_id"]


def test_a_recall_after_delivery_is_refused(endpoint: str) -> None:
    topic, group = _name("late-recall"), _name("g")
    (sent,) = pyclient.run(
        "produce", "--topic", topic, "--delayed", "1", "--delay-s", "1", endpoint=endpoint
    ).events("sent")
    got = _consume(endpoint, topic, group, "--count", "1", deadline_s=15).result()
    assert [r["message_id"] for r in _received(got)] == [sent["message_id"]]

    late = pyclient.run(
        "recall", "--topic", topic, "--handle", sent["recall_handle"],
        endpoint=endpoint, check=False,
    )  # fmt: skip
    assert late.returncode == pyclient.EXIT_FAILED, late.report()
    error = late.one("error")
    assert error["phase"] == "recall" and error["code"] not in (None, 20000), error


def test_a_lapsed_invisibility_redelivers_as_attempt_2(endpoint: str) -> None:
    topic, group = _name("lapse"), _name("g")
    (sent,) = pyclient.run("produce", "--topic", topic, "--normal", "1", endpoint=endpoint).events(
        "sent"
    )
    got = _consume(
        endpoint, topic, group, "--count", "1", "--lapse", "1", "--invisible-s", "10",
        "--require-complete", deadline_s=40,
    ).result()  # fmt: skip
    first, again = _received(got)
    assert first["message_id"] == again["message_id"] == sent["message_id"]
    assert (first["delivery_attempt"], first["acked"]) == (1, False)
    assert (again["delivery_attempt"], again["acked"]) == (2, True)
    assert again["receipt_handle"] != first["receipt_handle"]
    (lapsed,) = got.one("done")["lapsed"]
    assert lapsed["attempts"] == [1, 2]
    took_ms = again["received_at_ms"] - first["received_at_ms"]
    assert 9_500 <= took_ms < 10_000 + LATE_MS, took_ms  # 10 s from the server's receive
