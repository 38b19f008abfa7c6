"""``delayq serve``: one shard behind gRPC, with health, reflection and metrics.

Two gRPC servers: the public one (DelayQueue, health, reflection) on ``listen``
and the admin one (ShardAdmin, health) on ``admin_listen``, a port of its own
that only the control plane and the shard's replicas need (``listeners.py``);
and one more per protocol front-end the caller hands in (``frontends``: the
RocketMQ 5 protocol), with the public port's TLS. Plaintext public and
front-end ports are pygrpc-native's servers (``grpc_server``, its ~5x cheaper
calls), the others grpc.aio's.

Lifecycle: bind (public gRPC, admin gRPC, then metrics: any address taken or
unusable ends start-up with ``CannotServe``; so does a TLS certificate that
cannot be read, ``tls.py``) and answer health checks NOT_SERVING; open the
engine (recovery, which may take minutes after a power loss) while the shard's
own calls are refused UNAVAILABLE (``RecoveryGate``, asked by each port's one
handler wrapper: ``handlers``; no interceptors); mark SERVING and run until
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
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence

import grpc
from grpc_health.v1 import health_pb2

from ..admin.v1 import admin_pb2, admin_pb2_grpc
from ..engine import Engine
from ..push.egress import Egress
from ..push.secrets import SecretStore
from ..replication.node import ShardNode
from ..role import Role
from ..v1 import delayq_pb2, delayq_pb2_grpc
from . import nativeserver
from . import readiness as ready
from .acceptors import AcceptingServer
from .admin import ShardAdminServicer
from .calls import Calls
from .config import ServerSettings
from .decoding import RefusalLog
from .frontends import FrontendSpec, FrontPort, NodeParts
from .gate import RecoveryGate
from .handlers import Guard, Handlers
from .internal import failure
from .listeners import bind, exposed, probed
from .metrics import MetricSources, serve_metrics
from .pushers import Pushers
from .rpcmetrics import RpcDurations
from .servicer import DelayQueueServicer
from .tls import CertFiles, server_credentials
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
def _metrics(sources: MetricSources, listen: str, readiness: ready.Readiness) -> Iterator[str]:
    """The /metrics (and /readyz) server for the run (its address, or "off"); raises
    CannotServe."""
    if listen == "off":
        yield "off"
        return
    try:
        http = serve_metrics(sources, listen, readiness)
    except OSError as exc:
        raise CannotServe(f"cannot serve metrics on {listen}: {exc.strerror or exc}") from exc
    try:
        yield f"{listen.rpartition(':')[0]}:{http.server_port}"
    finally:
        http.shutdown()
        http.server_close()


def _credentials(settings: ServerSettings, port: str) -> grpc.ServerCredentials | None:
    """A port's TLS (``tls.py``; None: plaintext): the admin port takes the control
    plane's client certificates, every other port the public one's. Each server
    gets credentials of its own (gRPC binds them to one). Without ``public_tls`` only
    the admin port serves TLS."""
    cert, key = settings.tls_cert, settings.tls_key
    if cert is None or key is None or (port != "admin" and not settings.public_tls):
        return None
    client_ca = settings.admin_client_ca if port == "admin" else settings.tls_client_ca
    try:
        return server_credentials(CertFiles(cert=cert, key=key, client_ca=client_ca), port)
    except (OSError, ValueError) as exc:
        raise CannotServe(f"cannot serve TLS: {exc}") from exc


def _pushers(settings: ServerSettings, engine: Engine, calls: Calls) -> Pushers:
    """The node's pushers (run once the engine is open), and the calls' push hooks:
    the egress allow-list and the secret check of a target set, Stats' reports."""
    secrets = SecretStore(settings.push_secret_dir, engine.clock.monotonic_s)
    pushers = Pushers(
        source=calls.consuming,
        delivering=engine.replicating.delivering,
        push_groups=lambda: calls.run(engine.push_groups),
        clock=engine.clock,
        egress=Egress(settings.push_allow),
        secrets=secrets,
        max_connections=settings.push_max_connections,
        shards=lambda: calls.map.count,
        lease_left=engine.replicating.lease_left_s,
    )
    calls.push_allow = settings.push_allow
    calls.check_push_secret = pushers.check_secret
    calls.push_snapshots = pushers.snapshots
    return pushers


def _native_can_serve() -> bool:
    """Whether pygrpc-native can start here: it opens the Unix socket of its grpc.aio
    fallback in a new temporary directory. Without a writable one (a read-only root
    file system and no /tmp volume) the plaintext ports are grpc.aio's, with a warning."""
    try:
        tempfile.gettempdir()
    except OSError as exc:
        log.warning(
            "no writable temporary directory (%s): the plaintext ports are served by "
            "grpc.aio, not pygrpc-native (mount one at /tmp or set TMPDIR)",
            exc,
        )
        return False
    return True


def _grpc_server(limit: int, native: bool = False) -> grpc.aio.Server:
    """A server without interceptors: its handlers are registered wrapped
    (``handlers.Handlers``, with ``internal.failure``: no exception escapes a call
    without a status). ``native``: pygrpc-native's (HTTP/2 and gRPC in Rust
    threads, calls handed to the event loop in batches; plaintext only; its
    streaming-request methods, such as reflection and RocketMQ's Telemetry, pass to
    a grpc.aio server behind it), else grpc.aio's, taking concurrent calls of one
    method together (``acceptors``)."""
    options = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        # replicas ping their stream's connection every 2 s (replication.follow)
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000),
        ("grpc.keepalive_permit_without_calls", 1),
        # gRPC core sets SO_REUSEPORT by default: a second server on this port would
        # start and share its connections (two shards answering one address)
        ("grpc.so_reuseport", 0),
    ]
    if native:
        return nativeserver.server(options)
    return AcceptingServer(grpc.aio.server(options=options), ())


async def serve(
    settings: ServerSettings,
    on_ready: Callable[[str, str, Mapping[str, str]], None] | None = None,
    stop: asyncio.Event | None = None,
    frontends: Sequence[FrontendSpec] = (),
) -> None:
    """Run one shard until SIGTERM or SIGINT, or until ``stop`` is set when given
    (then the caller owns the process' signals). ``on_ready(address, admin,
    others)`` is called once the shard serves, with the public and the admin
    address bound and each front-end's by name. Raises ``CannotServe`` or the
    engine's error (a data directory in use, corrupt data) when start-up fails;
    the ports are closed again by then."""
    engine = Engine(settings.engine)  # opened (recovered) once the ports answer
    gate = RecoveryGate(SERVICE_NAME, RECOVERING, exempt=("GetRoute",))
    refusals = RefusalLog()  # undecodable requests on either port, reported together
    durations = RpcDurations()  # every port's calls, by service, method and status
    limit = request_limit(settings)
    native = settings.grpc_server == "native" and _native_can_serve()
    public_credentials = _credentials(settings, "public")
    server = _grpc_server(limit, native=native and public_credentials is None)
    admin_server = _grpc_server(limit)
    public = Handlers(Guard(refusals, failure, durations, gate))
    admin_handlers = Handlers(Guard(refusals, failure, durations))
    try:
        address = bind(server, settings.listen, public_credentials)
    except RuntimeError as exc:
        raise CannotServe(f"cannot listen on {settings.listen}: {exc}") from exc
    try:
        admin_address = bind(admin_server, settings.admin_listen, _credentials(settings, "admin"))
    except RuntimeError as exc:
        raise CannotServe(f"cannot listen on {settings.admin_listen} (admin): {exc}") from exc
    fronts = []
    for spec in frontends:
        fgate = RecoveryGate(spec.service, RECOVERING)
        guard = Guard(refusals, failure, durations, fgate)
        credentials = _credentials(settings, spec.name)
        plain = native and credentials is None
        port = FrontPort(spec, _grpc_server(limit, native=plain), fgate, Handlers(guard))
        try:
            port.open(credentials)
        except RuntimeError as exc:
            raise CannotServe(f"cannot listen on {spec.listen} ({spec.name}): {exc}") from exc
        fronts.append(port)
    if exposed(settings.admin_listen, tls=settings.tls):
        log.warning(
            "the admin service (Promote, Fence, the replication stream) listens on %s "
            "without TLS: anyone who reaches it can take this shard over",
            admin_address,
        )
    try:
        topology = Topology(
            settings.shard_map,
            settings.engine.shard,
            settings.advertise or address,
            admin_address,
            clock=engine.clock,
        )
    except ValueError as exc:
        raise CannotServe(str(exc)) from None
    advertise = settings.advertise or address
    node = ShardNode(
        engine.replicating,
        name=settings.node_name or advertise,
        address=advertise,
        admin_address=admin_address,
        replication=settings.replication,
        min_insync=settings.min_insync,
        ack_timeout_s=settings.replication_timeout_s,
        follow=settings.follow,
        replica=settings.role is Role.REPLICA,
        on_master=topology.standalone_master,
        tls=settings.peer_tls,
    )
    readiness = ready.Readiness()
    calls = Calls(engine, topology, peer_tls=settings.forward_tls)  # every protocol's
    pushers = _pushers(settings, engine, calls)
    sources = MetricSources(engine, topology, node, refusals, durations, calls)
    with _metrics(sources, settings.metrics_listen, readiness) as metrics:
        servicer = DelayQueueServicer(calls, advertise)
        delayq_pb2_grpc.add_DelayQueueServicer_to_server(servicer, public)
        admin = ShardAdminServicer(node, engine.moving, topology)
        admin_pb2_grpc.add_ShardAdminServicer_to_server(admin, admin_handlers)
        health_servicer = probed(public, SERVICE_NAME)
        parts = NodeParts(calls, advertise)
        for port in fronts:
            await port.add(parts)
        others = {port.spec.name: port.address for port in fronts}
        probed(admin_handlers, ADMIN_SERVICE_NAME)  # answers SERVING from the start
        public.add_to(server)
        admin_handlers.add_to(admin_server)
        names = ("", SERVICE_NAME)
        for name in names:
            await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()
        await admin_server.start()
        for port in fronts:
            await port.start()
        if stop is None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        where = {
            "address": address,
            "admin": admin_address,
            "metrics": metrics,
            "data_dir": str(settings.engine.data_dir),
            "shard": settings.engine.shard,
            "topology_epoch": topology.map.topology_epoch,
            "shards": topology.map.count,
            "node": node.name,
            "role": engine.role,
            "replication": settings.replication,
            "tls": ("every port" if settings.public_tls else "admin port")
            if settings.tls
            else "off",
            **others,
        }
        watcher = asyncio.create_task(topology.watch(stop))
        log.info("recovering", extra=where)
        try:
            # in a thread: the event loop answers health checks meanwhile
            await asyncio.to_thread(engine.start)
        except BaseException:
            watcher.cancel()
            await server.stop(None)
            await admin_server.stop(None)
            for port in fronts:
                await port.stop(None)
            calls.shutdown()
            raise
        # Startup objects (modules, gRPC, the engine as recovered) live for the whole
        # run: moved out of the collector's reach, a full collection walks only what
        # was made since and pauses delivery for about a millisecond, not 10-20 ms.
        gc.collect()
        gc.freeze()
        node.started()
        pushing = asyncio.create_task(pushers.run(stop)) if settings.push else None
        if not stop.is_set():  # else asked to stop while recovering: stop now
            gate.open()
            for name in names:
                await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
            for port in fronts:
                await port.serving()
            readiness.set(ready.SERVING)
            log.info("serving", extra={**where, "recovery": engine.recovery})
            if on_ready:
                on_ready(address, admin_address, others)
            await stop.wait()
        log.info("shutting down", extra={"grace_s": settings.grace_s})
        if pushing is not None:  # stop set: requests under way aborted, left in flight
            await pushing
        readiness.set(ready.STOPPING)
        await health_servicer.enter_graceful_shutdown()
        await node.step_down()
        await node.stop()
        await asyncio.gather(
            server.stop(settings.grace_s),
            admin_server.stop(settings.grace_s),
            *(port.stop(settings.grace_s) for port in fronts),
        )
        calls.shutdown()
        refusals.flush()
        await calls.close()
        for port in fronts:
            await port.close()
        admin.exports.close()
        stop.set()
        await watcher
        left = engine.close()
        log.info("stopped", extra={"left": left})
