"""Push settings of a real ``delayq serve`` process that the end-to-end tests
(``tests/integration/test_push.py``: a load, failures, Retry-After, an outage,
refused targets by loopback and metadata) do not cover:

- a target refused when set for a private literal address, or for a secret ref
  that names nothing under ``--push-secret-dir``, naming the field and why;
- a node started with ``--push false`` never pushes (no pusher, no request to a
  real HTTP receiver in this process).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest

import delayq
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.servers import ServerProcess

TOPIC = "hooks"

pytestmark = pytest.mark.timeout(120)


class Receiver:
    """Counts the requests it gets, answering 200."""

    def __init__(self) -> None:
        self.hits = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.hits += 1
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    s = ServerProcess(
        tmp_path / "data",
        ["--push-allow", "127.0.0.1/32", "--push-secret-dir", str(secrets)],
    ).start()
    try:
        yield s
    finally:
        s.stop()


def set_push(address: str, group: str, url: str, secret_ref: str = "") -> None:
    """Make ``group`` a push group to ``url`` (over the wire: SetGroupPolicy)."""
    target = pb.PushTarget(url=url, secret_ref=secret_ref)
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


def test_targets_refused_when_set(server: ServerProcess) -> None:
    bad = [
        ("http://10.1.2.3/x", "", "policy.push.url", "private"),
        ("http://127.0.0.1:9/x", "absent", "policy.push.secret_ref", "'absent'"),
    ]
    for url, ref, field, why in bad:
        with pytest.raises(grpc.RpcError) as refused:
            set_push(server.address, "bad", url, ref)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in str(refused.value.details()) and why in str(refused.value.details())


def test_a_node_started_with_push_false_never_pushes(tmp_path: Path) -> None:
    rx = Receiver()
    server = ServerProcess(tmp_path / "data", ["--push-allow", "127.0.0.1/32", "--push", "false"])
    server.start()
    try:
        set_push(server.address, "web", rx.url())
        with delayq.Client(server.address) as c:
            c.schedule(TOPIC, b"x")
            _wait(lambda: _group_stats(c, "web").policy.push is not None, "the push group set")
            time.sleep(1.5)  # six looks of the pushers, had they run
            assert _group_stats(c, "web").push is None
        assert rx.hits == 0
    finally:
        server.stop()
        rx.close()
