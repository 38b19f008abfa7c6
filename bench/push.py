"""Push delivery benchmark: one ``delayq serve`` (``--push-allow 127.0.0.1/32``)
pushing a push group's messages to a local receiver that answers 200 at once
(aiohttp, its own process), at offered rates of 1k, 5k and 10k messages a second
(``--rates``), each for ``--seconds``; the receiver, the client and the server
share this machine's cores. Messages are scheduled ahead (batches of 500, 200-byte
bodies), due evenly over the window; the figures start when the first is due.

Figures per rate R (``--json FILE`` writes them with these names):
  push_R_per_s               pushes answered a second, the first due to the last
                             arrival (the goal: >= 5,000 per shard)
  push_R_lateness_ms_p50/p99/max, push_R_early_count
                             arrival at the receiver minus the due time
                             (``bench.lateness``; the goal: p99 <= 50 ms)
  push_R_server_cpu_us_per_push, push_R_receiver_cpu_us_per_push
                             CPU of the server process and of the receiver's over
                             the window, per push
  push_R_duplicates          requests beyond one per message (0 on a calm run)
``--signed``: the group signs with a secret (one HMAC-SHA256 a request more).
``--quick``: 200 and 1,000 a second for 2 s.

    python -m bench.push [--rates 1000,5000,10000] [--seconds 10] [--signed]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.e2e import _proc_cpu_s
from bench.lateness import lateness_figures
from bench.systems import free_port, spawn_delayq, stop_process
from delayq import Client, GroupPolicy, Outgoing, PushTarget

BODY = b"p" * 200
BATCH = 500


# -- the receiver (its own process: python -m bench.push --receiver PORT) -------


def receive(port: int) -> None:
    """Answer every POST 200 at once, noting (webhook-id, due ms, arrival ms);
    GET /figures?from=N answers what was noted from the N-th on, and the process'
    CPU seconds, as JSON."""
    from aiohttp import web

    seen: list[tuple[str, int, float]] = []

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        due = int(request.headers.get("delayq-due-ms", "0"))
        seen.append((request.headers.get("webhook-id", ""), due, time.time() * 1000))
        return web.Response(status=200)

    async def figures(request: web.Request) -> web.Response:
        start = int(request.query.get("from", "0"))
        return web.json_response({"seen": seen[start:], "cpu_s": time.process_time()})

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_get("/figures", figures)
    print("READY", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def _figures(port: int, start: int = 0) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/figures?from={start}"
    with urllib.request.urlopen(url, timeout=60) as resp:
        doc: dict[str, Any] = json.loads(resp.read())
    return doc


# -- the driver -----------------------------------------------------------------


def run_rate(address: str, port: int, server_pid: int, rate: int, seconds: float,
             secret_ref: str) -> dict[str, float]:  # fmt: skip
    """One rate's figures (module notes); topic ``push-R``, group ``hook``."""
    topic, total = f"push-{rate}", int(rate * seconds)
    seen: list[tuple[str, int, float]] = []
    offset = len(_figures(port)["seen"])
    with Client(address) as c:
        target = PushTarget(url=f"http://127.0.0.1:{port}/hook", secret_ref=secret_ref)
        c.set_group_policy(topic, "hook", GroupPolicy(push=target))
        start = int(time.time() * 1000) + 2000 + total // 20  # room to schedule them all
        dues = [start + int(i * 1000 / rate) for i in range(total)]
        for i in range(0, total, BATCH):
            batch = [Outgoing(topic=topic, body=BODY, at=d) for d in dues[i : i + BATCH]]
            for done in c.schedule_many(batch):
                if not done.ok:
                    raise SystemExit(f"schedule refused: {done.error}")
    time.sleep(max(0.0, start / 1000 - time.time()))
    server0, receiver0 = _proc_cpu_s([server_pid]), _figures(port, 1 << 62)["cpu_s"]
    deadline = time.monotonic() + seconds + 120
    while True:
        time.sleep(0.5)
        doc = _figures(port, offset + len(seen))
        seen += [(str(m), int(due), float(at)) for m, due, at in doc["seen"]]
        mine = [(m, due, at) for m, due, at in seen if due >= start]
        if len({m for m, _, _ in mine}) >= total:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"rate {rate}: {len(mine)} of {total} pushed in time")
    server_s = _proc_cpu_s([server_pid]) - server0
    receiver_s = doc["cpu_s"] - receiver0
    first: dict[str, float] = {}  # a message's lateness at its first arrival
    for mid, due, at in mine:
        first[mid] = min(first.get(mid, at - due), at - due)
    last = max(at for _, _, at in mine)
    late = sorted(first.values())
    name = f"push_{rate}"
    figures = {
        f"{name}_per_s": round(total / max(0.001, (last - start) / 1000)),
        **{f"{name}_{k}": v for k, v in lateness_figures(late).items()},
        f"{name}_server_cpu_us_per_push": round(server_s * 1e6 / total, 1),
        f"{name}_receiver_cpu_us_per_push": round(receiver_s * 1e6 / total, 1),
        f"{name}_duplicates": len(mine) - len(first),
    }
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--receiver", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--rates", default="1000,5000,10000", help="offered msg/s, comma separated")
    ap.add_argument("--seconds", type=float, default=10, help="each rate's window")
    ap.add_argument("--signed", action="store_true", help="sign with a Standard Webhooks secret")
    ap.add_argument("--quick", action="store_true", help="200 and 1,000 msg/s for 2 s")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    a = ap.parse_args()
    if a.receiver is not None:
        receive(a.receiver)
        return
    rates = [200, 1000] if a.quick else [int(r) for r in a.rates.split(",")]
    seconds = 2.0 if a.quick else a.seconds
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        extra = ["--push-allow", "127.0.0.1/32"]
        ref = ""
        if a.signed:
            (root / "secrets").mkdir()
            key = base64.b64encode(secrets.token_bytes(24)).decode()
            (root / "secrets" / "bench").write_text(f"whsec_{key}\n")
            extra += ["--push-secret-dir", str(root / "secrets")]
            ref = "bench"
        port = free_port()
        rx = subprocess.Popen(
            [sys.executable, "-m", "bench.push", "--receiver", str(port)],
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        server, address = spawn_delayq(root / "data", *extra)
        try:
            assert rx.stdout is not None and rx.stdout.readline().startswith("READY")
            for _ in range(100):  # until it listens
                try:
                    _figures(port)
                    break
                except OSError:
                    time.sleep(0.1)
            figures: dict[str, float] = {}
            for rate in rates:
                figures.update(run_rate(address, port, server.pid, rate, seconds, ref))
        finally:
            stop_process(server)
            rx.terminate()
            rx.wait(20)
            if rx.stdout is not None:
                rx.stdout.close()
    text = json.dumps(figures)
    print(text)
    if a.json:
        a.json.write_text(text)


if __name__ == "__main__":
    main()
