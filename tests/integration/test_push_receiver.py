"""The push tests' receiver (``tests/support/push_receiver.py``, a real process)
and checker (``tests/support/pushing.py``): it answers by its plan, verifies
Standard Webhooks signatures (any of its secrets: a rotation), writes a verdict a
request, survives a restart on its port; the checker counts lost, early,
unverified, duplicate and unexpected deliveries."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from tests.support import push_receiver
from tests.support.push_receiver import verify
from tests.support.pushing import Receiver, Verdict, check_verdicts, secret


def _sign(key: str, msg_id: str, ts: int, body: bytes) -> str:
    raw = base64.b64decode(key.removeprefix("whsec_"))
    mac = hmac.new(raw, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str | None]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Retry-After")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Retry-After")


def _headers(msg_id: str, *sigs: str, attempt: int = 1, due_ms: int = 5) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(time.time())),
        "webhook-signature": " ".join(sigs),
        "delayq-attempt": str(attempt),
        "delayq-due-ms": str(due_ms),
        "delayq-topic": "t",
    }


def test_the_receiver_answers_by_its_plan_and_verifies_every_secret(tmp_path: Path) -> None:
    current, previous, stranger = secret(), secret(), secret()
    plan = [{"status": 500, "count": 1}, {"status": 429, "retry_after": "5", "count": 1},
            {"status": 200}]  # fmt: skip
    with Receiver(tmp_path / "rx", secrets=[current, previous], plan=plan) as rx:
        ts = int(time.time())
        answers = []
        for msg_id, key in [("a", current), ("b", previous), ("c", stranger), ("d", current)]:
            h = _headers(msg_id)
            h["webhook-timestamp"] = str(ts)
            h["webhook-signature"] = _sign(key, msg_id, ts, b"body")
            answers.append(_post(rx.url(), b"body", h))
        both = _headers("e")
        both["webhook-timestamp"] = str(ts)
        both["webhook-signature"] = " ".join(_sign(k, "e", ts, b"x") for k in (stranger, current))
        answers.append(_post(rx.url(), b"x", both))
        assert answers == [(500, None), (429, "5"), (200, None), (200, None), (200, None)]
        port = rx.port
        rx.restart()  # same port, verdicts kept
        assert rx.port == port
        unsigned = _headers("f", attempt=2)
        assert _post(rx.url(), b"", unsigned) == (500, None)  # a new run: its plan anew
        got = rx.verdicts()
    assert [(v.id, v.verified, v.sig_count, v.status) for v in got] == [
        ("a", True, 1, 500),
        ("b", True, 1, 429),
        ("c", False, 1, 200),
        ("d", True, 1, 200),
        ("e", True, 2, 200),
        ("f", False, 0, 500),
    ]
    assert got[-1].attempt == 2 and got[0].due_ms == 5 and got[0].topic == "t"


def test_without_a_secret_nothing_is_judged() -> None:
    assert verify([], b"x", {"webhook-id": "a"}) is None


@pytest.mark.parametrize("library", [True, False], ids=["standardwebhooks", "stdlib"])
def test_both_checks_accept_what_the_library_signs(
    library: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod's stdlib check agrees with the specification's library."""
    if not library:
        monkeypatch.setattr(push_receiver, "Webhook", None)
    key, other = secret(), secret()
    now = datetime.now(UTC)
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(key).sign("msg_1", now, b'{"a": 1}'),
    }
    assert verify([other, key], b'{"a": 1}', headers) is True
    assert verify([other], b'{"a": 1}', headers) is False
    assert verify([key], b'{"a": 2}', headers) is False


def _v(msg_id: str, at_ms: int, status: int = 200, verified: bool | None = True) -> Verdict:
    return Verdict(msg_id, 1, None, None, "t", at_ms, verified, 1, status, 0)


def test_the_checker_counts_what_went_wrong() -> None:
    acked = {"a": 100, "b": 100, "c": 100, "d": 100}
    seen = [
        _v("a", 100),
        _v("b", 99),  # early
        _v("c", 150, status=500),
        _v("c", 200),
        _v("c", 210),  # a duplicate
        _v("x", 300, verified=False),  # never acknowledged, and unsigned
    ]
    counts = check_verdicts(acked, seen)
    assert (counts.lost, counts.early, counts.unverified) == (1, 1, 1)
    assert (counts.duplicates, counts.unexpected, counts.requests) == (1, 1, 6)
    assert counts.lost_ids == ("d",)
