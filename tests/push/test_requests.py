"""A pushed request's headers: the message's (less reserved and invalid ones),
the target's winning, then delayq's; signed when keys are given."""

from __future__ import annotations

import base64

from standardwebhooks.webhooks import Webhook

from delayq.push.requests import Pushed, request_headers
from delayq.push.signing import parse_key

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


def _msg(headers: dict[str, str], key: str = "order-7") -> Pushed:
    return Pushed(
        id="0123abcd",
        topic="orders",
        group="web",
        key=key,
        headers=headers,
        attempt=2,
        due_ms=1_000,
        delivered_ms=1_005,
    )


def test_headers_in_order_target_winning_reserved_dropped() -> None:
    m = _msg(
        {
            "Content-Type": "application/json",
            "X-Trace": "abc",
            "X-Over": "message",
            "Host": "evil",
            "webhook-id": "forged",
            "delayq-topic": "forged",
            "bad name": "x",
            "X-Crlf": "a\r\nInjected: 1",
        }
    )
    h = request_headers(m, b"{}", [("x-over", "target")], [], now_s=1700000000)
    assert h["content-type"] == "application/json"
    assert h["x-trace"] == "abc" and h["x-over"] == "target"
    assert "host" not in h and "bad name" not in h and "x-crlf" not in h
    assert h["webhook-id"] == "0123abcd" and h["delayq-topic"] == "orders"
    assert h["webhook-timestamp"] == "1700000000"
    assert "webhook-signature" not in h  # no keys: unsigned
    assert (h["delayq-group"], h["delayq-key"], h["delayq-attempt"]) == ("web", "order-7", "2")
    assert (h["delayq-due-ms"], h["delayq-delivered-ms"]) == ("1000", "1005")


def test_a_messages_credentials_and_proxy_headers_are_dropped_the_targets_kept() -> None:
    m = _msg(
        {
            "Authorization": "Bearer producer",
            "Cookie": "session=1",
            "Proxy-Authorization": "Basic x",
            "Proxy-Anything": "y",
            "Connection": "close",
            "Keep-Alive": "5",
            "X-Kept": "1",
        }
    )
    h = request_headers(m, b"{}", [], [], now_s=1)
    dropped = {"authorization", "cookie", "proxy-authorization", "proxy-anything"}
    assert dropped.isdisjoint(h) and {"connection", "keep-alive"}.isdisjoint(h)
    assert h["x-kept"] == "1"
    h = request_headers(m, b"{}", [("Authorization", "Bearer target")], [], now_s=1)
    assert h["authorization"] == "Bearer target"


def test_default_content_type_no_key_header_without_key() -> None:
    h = request_headers(_msg({}, key=""), b"x", [], [], now_s=1)
    assert h["content-type"] == "application/octet-stream"
    assert "delayq-key" not in h


def test_signed_headers_verify_with_the_specifications_library() -> None:
    import time

    body = b'{"a": 1}'
    now = int(time.time())
    h = request_headers(_msg({}), body, [], [parse_key(SECRET)], now_s=now)
    Webhook(SECRET).verify(body, h)
