"""Lookup, cancel and reschedule by the producer's key, and the dedup window, on a
real ``delayq serve`` process through the client:

- under load: many keys of one, two or three messages each (scheduled with no
  ``if_exists``: a key may be shared), cancelled and rescheduled by key while
  another producer keeps scheduling keys of its own (once per key, ``reject``):
  each call says how many pending messages it acted on and acts on exactly those;
  the other producer's keys are untouched;
- across a restart of the node (not a promotion: the same data directory), after
  a SIGKILL (the key index built from the log) or a SIGTERM (loaded from the
  ``keys.idx`` the clean close saved): every key finds what it had, by-key calls
  act on it, a key held by a delivered message's dedup window is still held;
- the window's end: a key whose message was delivered (or cancelled) within its
  ``dedup_window`` answers a ``reject`` / ``keep`` schedule with that message; after
  the window the key is free and the schedule stores a new message. Without a
  window the key is free as soon as its message ended.

Keys under load: ``DELAYQ_KEY_LOAD_KEYS`` (300; 3,000 with ``--long``)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from delayq import Client, Outgoing
from delayq.client import NotFound
from tests.support.background import ClientLoop
from tests.support.keyed import Answer, schedule_keyed
from tests.support.servers import ServerProcess
from tests.support.sizes import size

pytestmark = pytest.mark.timeout(300)

Start = Callable[..., ServerProcess]
KEYS = size("DELAYQ_KEY_LOAD_KEYS", ci=300, long=3_000)
TOPIC = "orders"
HOUR_S = 3_600
WINDOW = timedelta(seconds=4)


def now_ms() -> int:
    return int(time.time() * 1000)


def pending_ids(client: Client, topic: str, key: str) -> list[str]:
    """The ids of the key's pending messages, oldest first ([] when NOT_FOUND)."""
    try:
        found = client.lookup_key(topic, key)
    except NotFound:
        return []
    assert all(m.state == "pending" and m.key == key for m in found), found
    return [m.id for m in found]


def deliver_now(client: Client, topic: str, key: str, window: timedelta | None) -> Answer:
    """``key`` scheduled under ``reject`` (with ``window``), due at once, received and
    acked: delivered."""
    first = schedule_keyed(client, topic, key.encode(), key, "reject", delay=0, dedup_window=window)
    assert first.outcome == "new", first
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = client.receive(topic, "g", max_messages=10, wait_s=0.5)
        if got:
            client.ack(topic, "g", [m.receipt for m in got])
        if any(m.id == first.id for m in got):
            return first
    raise AssertionError(f"{first.id} never delivered")


class OtherProducer(ClientLoop):
    """Schedules keys ``other-0``, ``other-1``... of ``TOPIC`` under ``reject`` until
    stopped (the load the by-key calls run under); ``ids`` by key."""

    def __init__(self, address: str) -> None:
        super().__init__(address, "other-producer")
        self.ids: dict[str, str] = {}

    def step(self) -> None:
        i = len(self.ids)
        batch = [
            Outgoing(
                topic=TOPIC, body=b"other", key=f"other-{i + j}", if_exists="reject", delay=HOUR_S
            )
            for j in range(20)
        ]
        for m, s in zip(batch, self.client.schedule_many(batch), strict=True):
            assert s.ok and s.id is not None, s
            self.ids[m.key] = s.id


def schedule_shared_keys(client: Client, count: int) -> dict[str, list[str]]:
    """Keys ``k-0``.. each with 1..3 messages (no ``if_exists``); their ids by key,
    oldest first."""
    batch = [
        Outgoing(topic=TOPIC, body=b"k-%d/%d" % (i, n), key=f"k-{i}", delay=HOUR_S + n)
        for i in range(count)
        for n in range(i % 3 + 1)
    ]
    ids: dict[str, list[str]] = {}
    for start in range(0, len(batch), 500):
        part = batch[start : start + 500]
        for m, s in zip(part, client.schedule_many(part), strict=True):
            assert s.ok and s.id is not None, s
            ids.setdefault(m.key, []).append(s.id)
    return ids


def test_cancel_and_reschedule_by_key_under_load(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address, timeout_s=30) as client, OtherProducer(srv.address) as other:
        ids = schedule_shared_keys(client, KEYS)
        keys = list(ids)
        assert all(pending_ids(client, TOPIC, k) == ids[k] for k in keys[:50])
        cancelled, moved = keys[0::2], keys[1::2]
        # several keys a call, and a call a key
        assert client.cancel_keys(TOPIC, cancelled[:100]) == [len(ids[k]) for k in cancelled[:100]]
        for k in cancelled[100:]:
            assert client.cancel_key(TOPIC, k) == len(ids[k])
        due = now_ms() + 2 * HOUR_S * 1000
        for k in moved:
            new = client.reschedule_key(TOPIC, k, at=due)
            assert len(new) == len(ids[k]), (k, new)
            assert all(s.id is not None and s.deliver_at_ms == due for s in new)
            assert not {s.id for s in new} & set(ids[k]), "new ids"
            assert pending_ids(client, TOPIC, k) == [s.id for s in new], "oldest first"
            ids[k] = [str(s.id) for s in new]
        while len(other.ids) < 200 and other.failure is None:
            time.sleep(0.05)  # the load ran meanwhile, and still runs
        for k in cancelled:
            assert pending_ids(client, TOPIC, k) == []
            with pytest.raises(NotFound):
                client.cancel_key(TOPIC, k)
            with pytest.raises(NotFound):
                client.reschedule_key(TOPIC, k, delay=60)
        for k in moved:
            assert pending_ids(client, TOPIC, k) == ids[k]
            assert {client.lookup(i).deliver_at_ms for i in ids[k]} == {due}
        with pytest.raises(NotFound):
            client.lookup_key("other-topic", moved[0])  # a topic without that key
    assert other.failure is None, other.failure
    with Client(srv.address) as client:
        for k, mid in list(other.ids.items())[:: max(1, len(other.ids) // 200)]:
            assert pending_ids(client, TOPIC, k) == [mid], k


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_keys_survive_a_restart_of_the_node(start_server: Start, stop: signal.Signals) -> None:
    srv = start_server()
    with Client(srv.address, timeout_s=30) as client:
        ids = schedule_shared_keys(client, 60)
        gone = list(ids)[:20]
        assert client.cancel_keys(TOPIC, gone) == [len(ids[k]) for k in gone]
        moved = client.reschedule_key(TOPIC, "k-20", delay=2 * HOUR_S)
        ids["k-20"] = [str(s.id) for s in moved]
        held = deliver_now(client, "trials", "account-7", timedelta(hours=1))
        free = deliver_now(client, "trials", "account-8", None)
        kept = schedule_keyed(client, TOPIC, b"keep", "keep-1", "keep")
    srv.stop(stop)
    again = start_server(data_dir=srv.data_dir)
    [opened] = [r for r in again.log_records() if r.get("msg") == "engine open"]
    index = opened["recovery"]["keys"]  # type: ignore[index]
    assert index == ("built" if stop == signal.SIGKILL else "loaded"), opened
    with Client(again.address, timeout_s=30) as client:
        for k, want in ids.items():
            assert pending_ids(client, TOPIC, k) == ([] if k in gone else want), k
        retry = schedule_keyed(client, TOPIC, b"keep", "keep-1", "keep")
        assert (retry.outcome, retry.id) == ("kept", kept.id)
        window = schedule_keyed(client, "trials", b"again", "account-7", "reject")
        assert (window.outcome, window.id) == ("exists", held.id), "held by its window"
        assert pending_ids(client, "trials", "account-7") == [], "held, not pending"
        after = schedule_keyed(client, "trials", b"again", "account-8", "reject")
        assert after.outcome == "new" and after.id != free.id, "no window: free"
        assert client.cancel_key(TOPIC, "k-21") == len(ids["k-21"])
        [moved_again] = client.reschedule_key(TOPIC, "k-30", delay=60)
        assert pending_ids(client, TOPIC, "k-30") == [moved_again.id]
        with pytest.raises(NotFound):
            client.cancel_key(TOPIC, gone[0])


def wait_past(at_ms: int) -> None:
    while now_ms() <= at_ms:
        time.sleep(0.05)


def test_a_key_is_held_for_its_dedup_window_and_free_after_it(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address, timeout_s=30) as client:
        # delivered within its window: held (reject names it); after: free
        first = deliver_now(client, "trials", "account-1", WINDOW)
        ends = client.lookup(first.id).accepted_at_ms + WINDOW // timedelta(milliseconds=1)
        retry = schedule_keyed(client, "trials", b"again", "account-1", "reject")
        if now_ms() < ends:  # answered within the window (a slow machine may not be)
            assert (retry.outcome, retry.id) == ("exists", first.id)
            wait_past(ends)
            retry = schedule_keyed(client, "trials", b"again", "account-1", "reject")
        assert retry.outcome == "new" and retry.id != first.id, "free after the window"
        assert pending_ids(client, "trials", "account-1") == [retry.id]

        # cancelled within its window: held (keep answers it); after: free
        kept = schedule_keyed(client, "trials", b"k", "account-2", "keep", dedup_window=WINDOW)
        ends = client.lookup(kept.id).accepted_at_ms + WINDOW // timedelta(milliseconds=1)
        assert client.cancel_key("trials", "account-2") == 1
        again = schedule_keyed(client, "trials", b"k", "account-2", "keep")
        if now_ms() < ends:
            assert (again.outcome, again.id) == ("kept", kept.id)
            assert pending_ids(client, "trials", "account-2") == [], "held, not pending"
            wait_past(ends)
            again = schedule_keyed(client, "trials", b"k", "account-2", "keep")
        assert again.outcome == "new" and again.id != kept.id

        # no window: free once cancelled
        plain = schedule_keyed(client, "trials", b"p", "account-3", "reject")
        assert client.cancel_key("trials", "account-3") == 1
        after = schedule_keyed(client, "trials", b"p", "account-3", "reject")
        assert after.outcome == "new" and after.id != plain.id
