"""``delayq serve``: one shard behind gRPC, with health, reflection and metrics.

Lifecycle: bind (gRPC, then metrics: either address taken or unusable ends
start-up with ``CannotServe``) and answer health checks NOT_SERVING; open the
engine (recovery, which may take minutes after a power loss) while the shard's
own calls are refused UNAVAILABLE (``RecoveryGate``); mark SERVING and run until
SIGTERM or SIGINT (or the caller's ``stop`` event); then mark NOT_SERVING, stop
accepting, give in-flight calls ``grace_s``, close the engine (links what is
queued, fsyncs, checkpoints).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Callable, Iterator

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ..admin.v1 import admin_pb2, admin_pb2_grpc
from ..engine import Engine
from ..v1 import delayq_pb2, delayq_pb2_grpc
from .admin import ShardAdminServicer
from .config import ServerSettings
from .decoding import DecodeGuard, RefusalLog
from .gate import RecoveryGate
from .metrics import serve_metrics
from .node import ShardNode
from .servicer import DelayQueueServicer
from .topology import Topology

__all__ = [
    "MAX_REQUEST_BYTES",
    "RECOVERING",
    "SERVICE_NAME",
    "CannotServe",
    "request_limit",
    "serve",
]

log = logging.getLogger("delayq.server")
SERVICE_NAME = delayq_pb2.DESCRIPTOR.services_by_name["DelayQueue"].full_name
ADMIN_SERVICE_NAME = admin_pb2.DESCRIPTOR.services_by_name["ShardAdmin"].full_name
RECOVERING = "the shard is recovering (replaying its logs); retry shortly"
"""The message of calls refused while the engine opens."""
MAX_REQUEST_BYTES = 64 << 20
"""The largest request (and response) by default: a batch of 10,000 messages of a
few KiB each, or 250 of the largest default body (256 KiB)."""
_ONE_MESSAGE_EXTRA = 64 << 10  # beside a body: key (1 KiB), headers (16 KiB), topic, framing


def request_limit(settings: ServerSettings) -> int:
    """The gRPC server's largest request and response: ``MAX_REQUEST_BYTES``, or more
    when ``--max-body-bytes`` is so large that a single message would not fit."""
    return max(MAX_REQUEST_BYTES, settings.engine.max_body_bytes + _ONE_MESSAGE_EXTRA)


class CannotServe(Exception):
    """Start-up failed for a reason whoever runs the server must fix (an address in
    use, for one); the message says which. Nothing was served; the engine is closed."""


@contextlib.contextmanager
def _metrics(
    engine: Engine, listen: str, topology: Topology, node: ShardNode, refusals: RefusalLog
) -> Iterator[str]:
    """The /metrics server for the run (its address, or "off"); raises CannotServe."""
    if listen == "off":
        yield "off"
        return
    try:
        http = serve_metrics(engine, listen, topology, node, refusals)
    except OSError as exc:
        raise CannotServe(f"cannot serve metrics on {listen}: {exc.strerror or exc}") from exc
    try:
        yield f"{listen.rpartition(':')[0]}:{http.server_port}"
    finally:
        http.shutdown()
        http.server_close()


async def serve(
    settings: ServerSettings,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run one shard until SIGTERM or SIGINT, or until ``stop`` is set when given
    (then the caller owns the process' signals). ``on_ready(address)`` is called once
    the shard serves. Raises ``CannotServe`` or the engine's error (a data directory
    in use, corrupt data) when start-up fails; the ports are closed again by then."""
    engine = Engine(settings.engine)  # opened (recovered) once the ports answer
    gate = RecoveryGate(SERVICE_NAME, RECOVERING, exempt=("GetRoute",))
    guard = DecodeGuard()
    limit = request_limit(settings)
    server = grpc.aio.server(
        interceptors=[gate, guard],  # the guard is inner: it sees handlers as registered
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
        ],
    )
    try:
        port = server.add_insecure_port(settings.listen)
    except RuntimeError as exc:
        raise CannotServe(f"cannot listen on {settings.listen}: {exc}") from exc
    address = f"{settings.listen.rpartition(':')[0]}:{port}"
    try:
        topology = Topology(
            settings.shard_map, settings.engine.shard, settings.advertise or address
        )
    except ValueError as exc:
        raise CannotServe(str(exc)) from None
    advertise = settings.advertise or address
    node = ShardNode(
        engine,
        name=settings.node_name or advertise,
        address=advertise,
        replication=settings.replication,
        min_insync=settings.min_insync,
        ack_timeout_s=settings.replication_timeout_s,
        follow=settings.follow,
        replica=settings.role == "replica",
        on_master=topology.standalone_master,
    )
    with _metrics(engine, settings.metrics_listen, topology, node, guard.refusals) as metrics:
        servicer = DelayQueueServicer(engine, topology, advertise)
        delayq_pb2_grpc.add_DelayQueueServicer_to_server(servicer, server)
        admin = ShardAdminServicer(node, topology)
        admin_pb2_grpc.add_ShardAdminServicer_to_server(admin, server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, ADMIN_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
            server,
        )
        names = ("", SERVICE_NAME)
        for name in names:
            await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()
        if stop is None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        where = {
            "address": address,
            "metrics": metrics,
            "data_dir": str(settings.engine.data_dir),
            "shard": settings.engine.shard,
            "topology_epoch": topology.map.topology_epoch,
            "shards": topology.map.count,
            "node": node.name,
            "role": engine.role,
            "replication": settings.replication,
        }
        watcher = asyncio.create_task(topology.watch(stop))
        log.info("recovering", extra=where)
        try:
            # in a thread: the event loop answers health checks meanwhile
            await asyncio.to_thread(engine.start)
        except BaseException:
            watcher.cancel()
            await server.stop(None)
            servicer.shutdown()
            raise
        # Startup objects (modules, gRPC, the engine as recovered) live for the whole
        # run: moved out of the collector's reach, a full collection walks only what
        # was made since and pauses delivery for about a millisecond, not 10-20 ms.
        gc.collect()
        gc.freeze()
        node.started()
        if not stop.is_set():  # else asked to stop while recovering: stop now
            gate.open()
            for name in names:
                await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
            log.info("serving", extra={**where, "recovery": engine.recovery})
            if on_ready:
                on_ready(address)
            await stop.wait()
        log.info("shutting down", extra={"grace_s": settings.grace_s})
        await health_servicer.enter_graceful_shutdown()
        await node.step_down()
        await node.stop()
        await server.stop(settings.grace_s)
        servicer.shutdown()
        guard.refusals.flush()
        await servicer.close_channels()
        admin.exports.close()
        stop.set()
        await watcher
        left = engine.close()
        log.info("stopped", extra={"left": left})
