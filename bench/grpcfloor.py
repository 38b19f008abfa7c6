"""The floor gRPC Python puts under every delayq call: CPU per call of an echo
service that does nothing, in the server process and in the client, for a unary
call and for one message on an open bidirectional stream, on the asyncio server
(what ``delayq serve`` runs) and the thread-pool one.

    python -m bench.grpcfloor [--calls N] [--size BYTES] [--json FILE]

A Schedule of 100 messages is one unary call of ~22 KB (the default size): this
fixed cost divided by 100 is the part of ``bench.e2e``'s CPU per message no wire
encoding can remove. Speed is never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

__all__ = ["main"]

UNARY, STREAM = "/floor.Echo/Unary", "/floor.Echo/Stream"


def _same(data: bytes) -> bytes:
    return data


class _Echo(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, unary: Any, stream: Any) -> None:
        self._unary, self._stream = unary, stream

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if details.method == UNARY:
            return grpc.unary_unary_rpc_method_handler(self._unary, _same, _same)
        if details.method == STREAM:
            return grpc.stream_stream_rpc_method_handler(self._stream, _same, _same)
        return None


def _serve(kind: str) -> None:
    """The echo server (a child process): prints its port, serves until killed."""

    def unary(req: bytes, _: Any) -> bytes:
        return req

    def stream(reqs: Iterator[bytes], _: Any) -> Iterator[bytes]:
        yield from reqs

    async def aunary(req: bytes, _: Any) -> bytes:
        return req

    async def astream(reqs: Any, _: Any) -> Any:
        async for r in reqs:
            yield r

    if kind == "threads":
        srv = grpc.server(futures.ThreadPoolExecutor(8))
        srv.add_generic_rpc_handlers((_Echo(unary, stream),))
        print(srv.add_insecure_port("127.0.0.1:0"), flush=True)
        srv.start()
        srv.wait_for_termination()
        return

    async def run() -> None:
        srv = grpc.aio.server()
        srv.add_generic_rpc_handlers((_Echo(aunary, astream),))
        print(srv.add_insecure_port("127.0.0.1:0"), flush=True)
        await srv.start()
        await srv.wait_for_termination()

    asyncio.run(run())


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(kind: str, calls: int, size: int) -> dict[str, float]:
    """Server and client CPU µs per unary call and per streamed message."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.grpcfloor", "--serve", kind],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        out: dict[str, float] = {}
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            unary = channel.unary_unary(UNARY, _same, _same)
            body = b"x" * size
            unary(body, timeout=10)

            def timed(name: str, one: Any) -> None:
                server0, client0 = _cpu_s(child.pid), time.process_time()
                for _ in range(calls):
                    one()
                out[f"{kind}_{name}_server_cpu_us"] = round(
                    (_cpu_s(child.pid) - server0) / calls * 1e6, 1
                )
                out[f"{kind}_{name}_client_cpu_us"] = round(
                    (time.process_time() - client0) / calls * 1e6, 1
                )

            timed("unary", lambda: unary(body, timeout=10))
            sends: queue.Queue[bytes | None] = queue.Queue()
            answers = channel.stream_stream(STREAM, _same, _same)(iter(sends.get, None))

            def streamed() -> None:
                sends.put(body)
                next(answers)

            timed("stream", streamed)
            sends.put(None)
        return out
    finally:
        child.kill()
        child.wait()


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.grpcfloor", description=__doc__.split("\n")[0]
    )
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--size", type=int, default=22_000, help="bytes per request and answer")
    p.add_argument("--json", type=Path)
    p.add_argument("--serve", choices=["aio", "threads"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve:
        _serve(a.serve)
        return
    figures = {**measure("aio", a.calls, a.size), **measure("threads", a.calls, a.size)}
    print(json.dumps(figures, indent=2))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
