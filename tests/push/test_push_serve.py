"""Push delivery end to end: a real ``delayq serve`` process pushes a push
group's messages to a real HTTP receiver in this process (stdlib
``ThreadingHTTPServer``), which verifies each signature with the Standard
Webhooks library and records what it got.

- Every scheduled message arrives, signed (verified by ``standardwebhooks``),
  never before its due time; the group ends with nothing in flight; Stats show
  the pusher's 2xx count and no trace of the secret, nor does the node's log.
- A 429 with ``Retry-After: 2`` holds the whole target: no request in the 2 s
  after it; the message is pushed again and acked.
- A target the server must refuse is refused when set (a metadata literal, a
  secret ref that names nothing), naming the field.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

import delayq
from delayq import Outgoing
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.servers import ServerProcess

SECRET = "whsec_" + base64.b64encode(b"delayq-push-test-key-0123456789!").decode()
TOPIC = "hooks"

pytestmark = pytest.mark.timeout(120)


@dataclass
class Hit:
    id: str
    attempt: int
    due_ms: int
    at_ms: int
    verified: bool
    status: int
    body: bytes


class Receiver:
    """Records every request; answers by ``answer(hit_index) -> (status, headers)``."""

    def __init__(self, answer: Callable[[int], tuple[int, dict[str, str]]]) -> None:
        self.hits: list[Hit] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the pusher's pool expects

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                at_ms = time.time_ns() // 1_000_000
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    Webhook(SECRET).verify(body, headers, json_parse=False)
                    verified = True
                except WebhookVerificationError:
                    verified = False
                with receiver.lock:
                    status, extra = answer(len(receiver.hits))
                    receiver.hits.append(
                        Hit(
                            headers.get("webhook-id", ""),
                            int(headers.get("delayq-attempt", "0")),
                            int(headers.get("delayq-due-ms", "0")),
                            at_ms,
                            verified,
                            status,
                            body,
                        )
                    )
                self.send_response(status)
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # a pusher opens its connections at once (default: 5)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook?token=query-secret"

    def ok_ids(self) -> set[str]:
        with self.lock:
            return {h.id for h in self.hits if 200 <= h.status < 300}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "hook").write_text(SECRET + "\n")
    s = ServerProcess(
        tmp_path / "data",
        ["--push-allow", "127.0.0.1/32", "--push-secret-dir", str(secrets)],
    ).start()
    try:
        yield s
    finally:
        s.stop()


def set_push(address: str, group: str, url: str, secret_ref: str = "", **headers: str) -> None:
    """Make ``group`` a push group to ``url`` (over the wire: SetGroupPolicy)."""
    target = pb.PushTarget(url=url, secret_ref=secret_ref, headers=headers)
    request = pb.SetGroupPolicyRequest(topic=TOPIC, group=group, policy=pb.GroupPolicy(push=target))
    with grpc.insecure_channel(address) as ch:
        pb_grpc.DelayQueueStub(ch).SetGroupPolicy(request, timeout=10)


def _wait(done: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _group_stats(c: delayq.Client, group: str) -> delayq.GroupStats:
    (shard,) = c.stats(TOPIC).shards  # one shard: its groups
    topic = next(t for t in shard.topics if t.topic == TOPIC)
    return next(g for g in topic.groups if g.group == group)


def test_every_message_arrives_signed_never_early(server: ServerProcess) -> None:
    rx = Receiver(lambda i: (200, {}))
    n = 300
    try:
        with delayq.Client(server.address) as c:
            set_push(server.address, "web", rx.url(), "hook", **{"x-app": "test"})
            sent = c.schedule_many(
                [
                    Outgoing(topic=TOPIC, body=json.dumps({"n": i}).encode(), delay=(i % 20) / 10)
                    for i in range(n)
                ]
            )
            ids = {s.id for s in sent}
            _wait(lambda: ids <= rx.ok_ids(), "every message pushed")
            _wait(lambda: _group_stats(c, "web").in_flight == 0, "every push acked")
            pushed = lambda: (_group_stats(c, "web").push or stats.push).requests["2xx"]  # noqa: E731
            stats = _group_stats(c, "web")
            assert stats.push is not None
            _wait(lambda: pushed() >= n, "the reports caught up")  # made at each 0.25 s look
            stats = _group_stats(c, "web")
            assert stats.push is not None
            assert stats.push.state == "pushing"
            assert stats.push.requests["2xx"] >= n
            assert stats.push.target == f"http://127.0.0.1:{rx.port}"
            shown = repr(c.stats(TOPIC))
        with rx.lock:
            hits = [h for h in rx.hits if h.id in ids]
        assert all(h.verified for h in hits)
        assert all(h.at_ms >= h.due_ms for h in hits)
        assert len(hits) - len({h.id for h in hits}) == 0  # no failure here: no duplicate
        assert {json.loads(h.body)["n"] for h in hits} == set(range(n))
    finally:
        rx.close()
    secret_text = SECRET.removeprefix("whsec_")
    assert secret_text not in shown and secret_text not in server.logs()
    assert "query-secret" not in shown and "query-secret" not in server.logs()


def test_a_retry_after_holds_the_target(server: ServerProcess) -> None:
    rx = Receiver(lambda i: (429, {"Retry-After": "2"}) if i == 0 else (200, {}))
    try:
        with delayq.Client(server.address) as c:
            set_push(server.address, "held", rx.url())
            first = c.schedule(TOPIC, b"first").id
            _wait(lambda: len(rx.hits) >= 1, "the first request")
            more = {c.schedule(TOPIC, b"more").id for _ in range(5)}
            _wait(lambda: {first} | more <= rx.ok_ids(), "every message pushed")
        with rx.lock:
            hits = list(rx.hits)
        throttled = hits[0]
        assert (throttled.id, throttled.status) == (first, 429)
        assert all(h.at_ms >= throttled.at_ms + 2000 for h in hits[1:])
        again = [h for h in hits if h.id == first and h.status == 200]
        assert [h.attempt for h in again] == [2]
        assert all(not h.verified for h in hits)  # no secret_ref: unsigned
    finally:
        rx.close()


def test_targets_refused_when_set(server: ServerProcess) -> None:
    bad = [
        ("http://169.254.169.254/latest", "", "policy.push.url", "metadata"),
        ("http://10.1.2.3/x", "", "policy.push.url", "private"),
        ("http://127.0.0.1:9/x", "absent", "policy.push.secret_ref", "'absent'"),
    ]
    for url, ref, field, why in bad:
        with pytest.raises(grpc.RpcError) as refused:
            set_push(server.address, "bad", url, ref)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in str(refused.value.details()) and why in str(refused.value.details())


def test_a_node_started_with_push_false_never_pushes(tmp_path: Path) -> None:
    rx = Receiver(lambda i: (200, {}))
    server = ServerProcess(tmp_path / "data", ["--push-allow", "127.0.0.1/32", "--push", "false"])
    server.start()
    try:
        set_push(server.address, "web", rx.url())
        with delayq.Client(server.address) as c:
            c.schedule(TOPIC, b"x")
            _wait(lambda: _group_stats(c, "web").policy.push is not None, "the push group set")
            time.sleep(1.5)  # six looks of the pushers, had they run
            assert _group_stats(c, "web").push is None
        assert rx.hits == []
    finally:
        server.stop()
        rx.close()
