"""A standalone HTTP receiver of delayq's push deliveries, for the end-to-end push
tests (a real process: the pusher talks to it over a socket as to a user's
endpoint). Stdlib only, so it also runs in a pod from a ConfigMap; it verifies
signatures with the Standard Webhooks library when that is importable, with the
specification's HMAC-SHA256 written out here otherwise.

    python tests/support/push_receiver.py --port 0 --secret whsec_... \\
        --plan plan.json --out verdicts.jsonl      # prints "READY <port>" once bound

``--plan``: what it answers, a JSON list of phases taken in turn, each
``{"status": 500, "for_s": 20}`` (for 20 s from its first request), ``{"status":
429, "retry_after": "5", "count": 50}`` (the next 50 requests) or ``{"status":
200}`` (no bound: the rest); a phase may add ``"delay_s"`` (answer that late).
No plan: 200 for everything. The last phase never ends.

``--out``: one JSON line a request, flushed at once (a SIGKILLed receiver loses
nothing it answered): ``{"id", "attempt", "due_ms", "delivered_ms", "topic",
"at_ms" (arrival, Unix ms), "verified" (true/false; null without a secret),
"sig_count" (signatures in ``webhook-signature``), "status" (the answer),
"body_len"}``. The receiver judges nothing else: ``tests/support/pushing.py``
reads the verdicts against what the test acknowledged.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

try:  # the specification's own verifier, when installed (the dev extra has it)
    from standardwebhooks import Webhook
except ImportError:  # a pod with the stdlib only: the HMAC check below
    Webhook = None


class Plan:
    """The phases of answers, advanced by requests (thread-safe: one lock)."""

    def __init__(self, phases: Sequence[Mapping[str, Any]]) -> None:
        self._phases = list(phases) or [{"status": 200}]
        self._at = 0
        self._began: float | None = None  # monotonic start of the current phase
        self._served = 0  # requests of the current phase
        self._lock = threading.Lock()  # handler threads answer at once

    def next(self) -> Mapping[str, Any]:
        """The phase this request is answered by."""
        with self._lock:
            now = time.monotonic()
            while self._at < len(self._phases) - 1:
                phase = self._phases[self._at]
                if self._began is None:
                    break
                over_time = "for_s" in phase and now - self._began >= float(phase["for_s"])
                over_count = "count" in phase and self._served >= int(phase["count"])
                if not (over_time or over_count):
                    break
                self._at, self._began, self._served = self._at + 1, None, 0
            if self._began is None:
                self._began = now
            self._served += 1
            return self._phases[self._at]


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_") + "==")  # (padding may be left off)


def signatures(header: str) -> list[str]:
    """The ``v1`` signatures of a ``webhook-signature`` header."""
    return [p.split(",", 1)[1] for p in header.split() if p.startswith("v1,")]


def verify(secrets: Sequence[str], body: bytes, headers: Mapping[str, str]) -> bool | None:
    """Whether one of ``secrets`` signed the request (None: no secret to check with)."""
    if not secrets:
        return None
    for secret in secrets:
        if Webhook is not None:
            try:
                Webhook(secret).verify(body, dict(headers), json_parse=False)
                return True
            except Exception:  # the library's WebhookVerificationError, or a bad header
                continue
        msg_id, ts = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "")
        want = hmac.new(_key(secret), f"{msg_id}.{ts}.".encode() + body, hashlib.sha256)
        expected = base64.b64encode(want.digest()).decode()
        got = signatures(headers.get("webhook-signature", ""))
        if any(hmac.compare_digest(expected, s) for s in got):
            return True
    return False


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class Receiver(ThreadingHTTPServer):
    daemon_threads = True  # a request in flight never holds the exit
    allow_reuse_address = True  # restarted on the same port at once
    request_queue_size = 1024  # the pusher opens many connections at once (listen backlog)

    def __init__(self, address: tuple[str, int], plan: Plan, secrets: list[str], out: Path):
        super().__init__(address, Handler)
        self.plan = plan
        self.secrets = secrets
        self.out = out.open("a")
        self.write_lock = threading.Lock()  # one verdict line at a time

    def record(self, verdict: Mapping[str, Any]) -> None:
        with self.write_lock:
            self.out.write(json.dumps(verdict) + "\n")
            self.out.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the pusher's pool expects
    server: Receiver

    def _answer(self) -> None:
        at_ms = int(time.time() * 1000)
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        phase = self.server.plan.next()
        status = int(phase.get("status", 200))
        self.server.record(
            {
                "id": headers.get("webhook-id", ""),
                "attempt": _int(headers.get("delayq-attempt")),
                "due_ms": _int(headers.get("delayq-due-ms")),
                "delivered_ms": _int(headers.get("delayq-delivered-ms")),
                "topic": headers.get("delayq-topic", ""),
                "at_ms": at_ms,
                "verified": verify(self.server.secrets, body, headers),
                "sig_count": len(signatures(headers.get("webhook-signature", ""))),
                "status": status,
                "body_len": len(body),
            }
        )
        if "delay_s" in phase:
            time.sleep(float(phase["delay_s"]))
        self.send_response(status)
        if "retry_after" in phase:
            self.send_header("Retry-After", str(phase["retry_after"]))
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_POST = do_PUT = do_PATCH = _answer

    def log_message(self, format: str, *args: Any) -> None:
        """No line a request."""


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--secret", action="append", default=[], help="whsec_...; repeatable")
    p.add_argument("--plan", type=Path, help="the phases of answers (JSON)")
    p.add_argument("--out", type=Path, required=True, help="verdicts, one JSON line a request")
    a = p.parse_args(argv)
    phases = json.loads(a.plan.read_text()) if a.plan else []
    server = Receiver((a.host, a.port), Plan(phases), a.secret, a.out)
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
