"""The floor gRPC Python puts under every delayq call: CPU per call of an echo
service that does nothing, in the server process and in the client, for a unary
call and for one message on an open bidirectional stream, on the asyncio server
(what ``delayq serve`` runs) and the thread-pool one.

    python -m bench.grpcfloor [--calls N] [--size BYTES] [--json FILE]

A Schedule of 100 messages is one unary call of ~22 KB (the default size): this
fixed cost divided by 100 is the part of ``bench.e2e``'s CPU per message no wire
encoding can remove.

``--variants`` measures instead how the asyncio server's CPU per unary call
depends on what surrounds the echo (each variant ``methods/wrap/loop``):

- methods: ``generic`` (one generic handler) or ``registered`` (a service of
  ``METHODS`` methods registered as the generated ``add_*_to_server`` does:
  generic and ``add_registered_method_handlers``);
- wrap: ``none``, ``wrapper`` (delayq's one handler wrapper applied at
  registration, ``server.handlers``, with the gate, the decode guard, the failure
  mapping and the duration histogram) or ``chain`` (the same wrapper reached
  through two interceptors, as a gate and a handler-wrapping interceptor do);
- loop: ``asyncio`` or ``uvloop``;

each at every ``--sizes`` and with every ``--python`` (another interpreter with
grpcio installed runs the server child: ``wrap`` must then be ``none``). The
variants take turns ``--repeats`` times (a fresh server each turn), so a slow
spell of a shared machine touches all of them; the figures are the server
process's CPU (all its threads) per call: median, min and max of the turns, and
each turn's ratio to the first variant's. ``--callgrind`` counts the server's
instructions per call under valgrind instead: slow, but the same from run to run
whatever else the machine does (CPU time on a loaded 2-core machine spreads by
+-20 %). The protobuf backend and grpcio version of each interpreter are
reported.

Speed is never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from bench.percall import Served, cpu_s, drive

__all__ = ["main"]

SERVICE = "floor.Echo"
UNARY, STREAM = f"/{SERVICE}/Unary", f"/{SERVICE}/Stream"
METHODS = 17
"""The registered variant's service: as many methods as the RocketMQ port serves
(MessagingService, health and reflection)."""
DEFAULT_VARIANTS = (
    "generic/none/asyncio",
    "registered/none/asyncio",
    "generic/wrapper/asyncio",
    "generic/chain/asyncio",
    "registered/wrapper/asyncio",
    "registered/chain/asyncio",
    "generic/none/uvloop",
    "generic/wrapper/uvloop",
    "registered/wrapper/uvloop",  # delayq's grpc.aio ports
)


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

    if kind == "threads":
        srv = grpc.server(futures.ThreadPoolExecutor(8))
        srv.add_generic_rpc_handlers((_Echo(unary, stream),))
        print(srv.add_insecure_port("127.0.0.1:0"), flush=True)
        srv.start()
        srv.wait_for_termination()
        return
    methods, wrap, loop = kind.split("/") if "/" in kind else ("plain", "none", "asyncio")

    async def run() -> None:
        srv, handlers = _aio_server(methods, wrap)
        handlers(srv)
        port = srv.add_insecure_port("127.0.0.1:0")
        print(port, grpc.__version__, _protobuf_backend(), flush=True)
        await srv.start()
        await srv.wait_for_termination()

    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(run())
    else:
        asyncio.run(run())


async def _aunary(req: bytes, _: Any) -> bytes:
    return req


async def _astream(reqs: Any, _: Any) -> Any:
    async for r in reqs:
        yield r


def _protobuf_backend() -> str:
    try:
        from google.protobuf.internal import api_implementation  # type: ignore[import-untyped]
    except ImportError:
        return "none"
    return str(api_implementation.Type())


def _aio_server(methods: str, wrap: str) -> tuple[grpc.aio.Server, Any]:
    """A grpc.aio server and how to register the echo on it (variant ``methods/wrap``)."""
    if methods == "plain":  # the default figures: the echo and its stream, nothing else
        srv = grpc.aio.server()
        return srv, lambda s: s.add_generic_rpc_handlers((_Echo(_aunary, _astream),))
    interceptors: list[Any] = []
    wrapped: Any = lambda _method, handler: handler  # noqa: E731
    if wrap in ("wrapper", "chain"):
        from delayq.server.decoding import RefusalLog
        from delayq.server.gate import RecoveryGate
        from delayq.server.handlers import Guard, guarded
        from delayq.server.internal import failure
        from delayq.server.rpcmetrics import RpcDurations

        gate = RecoveryGate(SERVICE, "recovering")
        gate.open()
        guard = Guard(RefusalLog(), failure, RpcDurations(), gate)
        if wrap == "wrapper":
            wrapped = lambda method, handler: guarded(method, handler, guard)  # noqa: E731
        elif wrap == "chain":
            interceptors = [_Gate(gate), _Wrapping(guard)]
    srv = grpc.aio.server(interceptors=interceptors or None)
    names = (
        [f"M{i}" for i in range(METHODS - 1)] + ["Unary"] if methods == "registered" else ["Unary"]
    )
    table = {
        name: wrapped(
            f"/{SERVICE}/{name}", grpc.unary_unary_rpc_method_handler(_aunary, _same, _same)
        )
        for name in names
    }

    def register(s: grpc.aio.Server) -> None:
        s.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, table),))
        if methods == "registered":
            s.add_registered_method_handlers(SERVICE, table)

    return srv, register


class _Gate(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """An interceptor that lets calls through once ``gate`` is open (what a
    recovery gate costs an open call when it is an interceptor)."""

    def __init__(self, gate: Any) -> None:
        self._gate = gate

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        if self._gate.is_open or handler is None:
            return handler
        raise RuntimeError("the bench opens its gate first")


class _Wrapping(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """An interceptor that wraps each method's handler once (``guarded``) and hands
    out the wrapped twin per call."""

    def __init__(self, guard: Any) -> None:
        from delayq.server.handlers import guarded

        self._guard, self._guarded = guard, guarded
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        known = self._wrapped.get(details.method)
        if known is None or known[0] is not handler:
            twin = self._guarded(details.method, handler, self._guard)
            known = self._wrapped[details.method] = (handler, twin)
        return known[1]


def measure(kind: str, calls: int, size: int) -> dict[str, float]:
    """Server and client CPU µs per unary call and per streamed message."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.grpcfloor", "--serve", kind],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline().split()[0])
        out: dict[str, float] = {}
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            unary = channel.unary_unary(UNARY, _same, _same)
            body = b"x" * size
            unary(body, timeout=10)

            def timed(name: str, one: Any) -> None:
                server0, client0 = cpu_s(child.pid), time.process_time()
                for _ in range(calls):
                    one()
                out[f"{kind}_{name}_server_cpu_us"] = round(
                    (cpu_s(child.pid) - server0) / calls * 1e6, 1
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


def _one_variant(
    python: str, variant: str, calls: int, size: int, inflight: int, callgrind: bool
) -> Any:
    """(server cost per call, client CPU µs per call, grpcio version, protobuf
    backend) of one turn of ``variant`` served by ``python``; the server's cost is
    its CPU µs, or with ``callgrind`` thousands of instructions (``percall``)."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "service")])}
    cmd = [python, "-m", "bench.grpcfloor", "--serve", variant]
    with Served(cmd, cwd=root, env=env, callgrind=callgrind) as served:
        port, version, backend = served.line.split()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            unary = channel.unary_unary(UNARY, _same, _same)
            body = b"x" * size

            def make(n: int) -> None:
                drive(lambda: unary.future(body, timeout=60), n, inflight)

            make(min(calls, 200))  # warm: the handler table, caches
            server, client = served.cost(make, calls)
        return server, client, version, backend


def measure_variants(
    variants: list[str],
    pythons: list[str],
    sizes: list[int],
    calls: int,
    repeats: int,
    inflight: int,
    callgrind: bool = False,
) -> dict[str, Any]:
    """Server CPU µs per unary call of every variant x python x size (or thousands
    of instructions with ``callgrind``: ``server_kinstr``): the median, min and max
    of ``repeats`` turns taken in rotation; client CPU's median; and how many times
    cheaper than the first variant (first python, same size) on the server, turn
    by turn (median, min, max, and in how many turns it was)."""
    runs = [(py, v, size) for py in pythons for v in variants for size in sizes]
    seen: dict[tuple[str, str, int], list[tuple[float, float]]] = {r: [] for r in runs}
    versions: dict[str, list[str]] = {}
    for _ in range(repeats):
        for py, v, size in runs:
            server, client, version, backend = _one_variant(py, v, calls, size, inflight, callgrind)
            seen[py, v, size].append((server, client))
            versions[py] = [version, backend]
    rows = []
    for (py, v, size), turns in seen.items():
        servers = sorted(t[0] for t in turns)
        # against the first variant of the same python and size, turn by turn
        base = seen[pythons[0], variants[0], size]
        # (turns too short for the clock's tick measure 0: they have no ratio)
        ratios = sorted(b[0] / t[0] for t, b in zip(turns, base, strict=True) if t[0] and b[0])
        ratios = ratios or [math.nan]
        cost = "server_kinstr" if callgrind else "server_cpu_us"
        rows.append(
            {
                "variant": v,
                "python": py,
                "grpcio": versions[py][0],
                "protobuf": versions[py][1],
                "size": size,
                cost: round(statistics.median(servers), 1),
                f"{cost}_min": round(servers[0], 1),
                f"{cost}_max": round(servers[-1], 1),
                **(
                    {}
                    if callgrind
                    else {"client_cpu_us": round(statistics.median(t[1] for t in turns), 1)}
                ),
                "cheaper_than_first": round(statistics.median(ratios), 3),
                "cheaper_than_first_min": round(ratios[0], 3),
                "cheaper_than_first_max": round(ratios[-1], 3),
                "cheaper_turns": sum(r > 1 for r in ratios if not math.isnan(r)),
            }
        )
    return {
        "calls": calls,
        "repeats": repeats,
        "inflight": inflight,
        "callgrind": callgrind,
        "variants": rows,
    }


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.grpcfloor", description=__doc__.split("\n")[0]
    )
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--size", type=int, default=22_000, help="bytes per request and answer")
    p.add_argument("--json", type=Path)
    p.add_argument(
        "--variants",
        help="comma-separated methods/wrap/loop (see above), or 'all': measure these instead",
    )
    p.add_argument(
        "--sizes", default="200,22000", help="bytes per call, comma-separated (--variants)"
    )
    p.add_argument("--repeats", type=int, default=5, help="turns per variant (--variants)")
    p.add_argument("--inflight", type=int, default=1, help="calls in flight (--variants)")
    p.add_argument(
        "--callgrind",
        action="store_true",
        help="count the server's instructions per call under valgrind instead of its CPU "
        "(--variants; slow, but the machine's load does not move it)",
    )
    p.add_argument(
        "--python",
        action="append",
        help="interpreter for the server child, repeatable (--variants; default this one)",
    )
    p.add_argument("--serve", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve:
        _serve(a.serve)
        return
    figures: dict[str, Any]
    if a.variants:
        variants = [
            v
            for name in a.variants.split(",")
            for v in (DEFAULT_VARIANTS if name == "all" else (name,))
        ]
        figures = measure_variants(
            variants,
            a.python or [sys.executable],
            [int(x) for x in a.sizes.split(",")],
            a.calls,
            a.repeats,
            a.inflight,
            a.callgrind,
        )
    else:
        figures = {**measure("aio", a.calls, a.size), **measure("threads", a.calls, a.size)}
    print(json.dumps(figures, indent=2))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
