"""Push delivery: delayq calls an HTTP endpoint when each message is due, signed
by the Standard Webhooks specification, and retries until it answers 2xx.

Starts its own `delayq serve` (a temporary data directory; `--push-allow
127.0.0.1/32`, since the receiver here is on loopback, which targets may not
reach otherwise; `--push-secret-dir` holding the signing secret) and a receiver
on a free port that verifies every request with the `standardwebhooks` library,
answers the first one 503 with `Retry-After: 1` and the others 200. Schedules
three reminders, prints what the receiver saw, then the group's push stats.

Run: python push_to_a_receiver.py   (needs `pip install standardwebhooks`)
"""

from __future__ import annotations

import base64
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from standardwebhooks import Webhook

import delayq

TOPIC, GROUP = "example-reminders", "webhook"
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
seen: list[dict[str, Any]] = []  # what the receiver got, in arrival order


class Receiver(BaseHTTPRequestHandler):
    """The user's endpoint: verify, drop duplicates by webhook-id, answer."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        try:
            Webhook(SECRET).verify(body, dict(self.headers), json_parse=False)
            verified = True
        except Exception:
            verified = False
        first = not seen  # the very first request is told to come back in a second
        status = 503 if first else 200 if verified else 401
        seen.append({
            "id": self.headers["webhook-id"], "body": body.decode(), "status": status,
            "attempt": self.headers["delayq-attempt"], "verified": verified,
            "early": time.time() * 1000 < int(self.headers["delayq-due-ms"]),
        })  # fmt: skip
        self.send_response(status)
        if first:
            self.send_header("Retry-After", "1")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def serve(tmp: Path) -> tuple[subprocess.Popen[str], str]:
    """`delayq serve` allowed to push to loopback, with the secret's directory."""
    (tmp / "secrets").mkdir()
    (tmp / "secrets" / "reminders").write_text(SECRET + "\n")  # one whsec_ a line
    cmd = [sys.executable, "-m", "delayq.cli.main", "serve", "--data-dir", str(tmp / "data"),
           "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "off",
           "--push-allow", "127.0.0.1/32", "--push-secret-dir", str(tmp / "secrets")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "delayq serving on HOST:PORT (admin ..., data in ...)"
    if "serving on" not in line:
        proc.kill()
        raise SystemExit(f"delayq serve did not start: {line!r}")
    return proc, line.split("serving on ")[1].split()[0]


def main() -> int:
    http = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{http.server_address[1]}/hooks/reminder"
    with tempfile.TemporaryDirectory() as tmp:
        proc, server = serve(Path(tmp))
        try:
            with delayq.Client(server) as client:
                target = delayq.PushTarget(url=url, secret_ref="reminders")
                client.set_group_policy(TOPIC, GROUP, delayq.GroupPolicy(push=target))
                for body, delay in (("call Alice", 1), ("call Bob", 4), ("call Carol", 5)):
                    client.schedule(TOPIC, body.encode(), delay=delay)
                deadline = time.monotonic() + 60
                while sum(s["status"] == 200 for s in seen) < 3 and time.monotonic() < deadline:
                    time.sleep(0.1)
                stats = None
                while time.monotonic() < deadline:  # until the pusher counted the last 2xx
                    stats = next(
                        g.push for shard in client.stats(TOPIC).shards for t in shard.topics
                        for g in t.groups if g.group == GROUP and g.push is not None
                    )  # fmt: skip
                    if stats.requests.get("2xx", 0) >= 3:
                        break
                    time.sleep(0.1)
        finally:
            proc.terminate()
            proc.wait(20)
            http.shutdown()
    for s in seen:
        signed = "signature verified" if s["verified"] else "NOT VERIFIED"
        after = ", Retry-After 1" if s["status"] == 503 else ""
        print(f"received {s['body']!r} (attempt {s['attempt']}, {signed}): "
              f"answered {s['status']}{after}")  # fmt: skip
    print(f"none early: {not any(s['early'] for s in seen)}")
    assert stats is not None
    ok, held = stats.requests.get("2xx", 0), stats.requests.get("503", 0)
    print(f"stats: state {stats.state}, 2xx {ok}, 503 {held}")
    retried = len(seen) - len({s["id"] for s in seen})
    print(f"done: {len({s['id'] for s in seen})} pushed, {retried} retried")
    return 0


if __name__ == "__main__":
    sys.exit(main())
