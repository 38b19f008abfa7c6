"""Server settings from flags, environment and a TOML file (pure: the caller
passes the three sources in). Precedence: flag > ``DELAYQ_<NAME>`` env var >
config file > default. Every key exists in all three forms: ``--flush-interval``,
``DELAYQ_FLUSH_INTERVAL``, ``flush_interval = "1s"``."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..addresses import (
    ADMIN_PORT,
    DEFAULT_ADDRESS,
    DEFAULT_HOST,
    METRICS_PORT,
    ROCKETMQ_PORT,
    check_address,
)
from ..durations import DEFAULT_DELAY_LEVELS, parse_delay_levels, parse_duration_ms
from ..push.egress import parse_allow
from ..role import Role
from ..settings import AttemptLimits, EngineSettings, FlushPolicy
from ..tls import TlsConfig

__all__ = ["OPTIONS", "ROCKETMQ_DEDUP_WINDOW_MS", "ServerSettings", "load"]


ROCKETMQ_DEDUP_WINDOW_MS = 600_000
"""The RocketMQ port's dedup window by default: 10 min, well past a client's retries."""


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    listen: str = DEFAULT_ADDRESS
    """gRPC address (host:port)."""
    metrics_listen: str = f"{DEFAULT_HOST}:{METRICS_PORT}"
    """Prometheus /metrics address; "off" disables it."""
    advertise: str = ""
    """Address clients should use for this shard (GetRoute); defaults to ``listen``."""
    admin_listen: str = f"{DEFAULT_HOST}:{ADMIN_PORT}"
    """The admin service's (ShardAdmin: roles, replication, export) gRPC address, a
    port of its own so that only the control plane reaches it. Loopback by default:
    without TLS any other host is served only when asked, with a warning."""
    tls_cert: Path | None = None
    """The node's TLS certificate (PEM chain), served on both ports; None: plaintext.
    Re-read when it changes (``tls.py``)."""
    tls_key: Path | None = None
    """Its private key (PEM); given exactly when ``tls_cert`` is."""
    tls_client_ca: Path | None = None
    """The public port requires client certificates of this CA (mutual TLS)."""
    public_tls: bool = True
    """With ``tls_cert``: the public and RocketMQ ports serve it too; False: only the
    admin port does (the operator's default: admin mutual TLS, public plaintext)."""
    rocketmq_listen: str = ""
    """Serve the RocketMQ 5 gRPC protocol (``delayq.rocketmq``) on this address,
    with the public port's TLS; "": off."""
    rocketmq_dedup_window_ms: int = ROCKETMQ_DEDUP_WINDOW_MS
    """How long the RocketMQ port deduplicates sends by the client's message id, ms
    (a client's retry after a lost answer is stored once); 0: off. At most the
    engine's ``max_dedup_window_ms`` (not given: the default, or that when less)."""
    grpc_server: str = "native"
    """What serves the public and RocketMQ ports when they are plaintext: "native"
    (pygrpc-native: HTTP/2 in Rust, calls handed to the event loop in batches) or
    "grpcio" (grpc.aio). TLS ports and the admin port are always grpcio's."""
    admin_client_ca: Path | None = None
    """The admin port requires client certificates of this CA, the control plane's
    (default: ``tls_client_ca``); it also verifies the nodes this one calls."""
    log_format: str = "text"
    log_level: str = "info"
    grace_s: float = 10.0
    """Seconds in-flight calls get to finish on SIGTERM."""
    shard_map: Path | None = None
    """The cluster's shard map (JSON, re-read on change); None: serve alone."""
    node_name: str = ""
    """This node's name in its shard (the control plane's); defaults to the address."""
    follow: str = ""
    """Start as a replica of the master whose admin service is at this address
    (host:port; the replication stream is an admin call); "": as master."""
    role: Role = Role.MASTER
    """``Role.REPLICA``: start as a replica even without ``follow``, acking nothing until
    a control plane's Follow or Promote (a pod whose master is not known yet)."""
    replication: str = "async"
    """"async": ack after the master's own write; "sync": after the in-sync set fsynced."""
    min_insync: int = 2
    """Sync replication: nodes (the master included) that must hold a write."""
    replication_timeout_s: float = 3.0
    """Sync replication: how long an ack waits for the in-sync set before UNAVAILABLE."""
    push: bool = True
    """Push groups' messages are pushed by this node while it is its shard's master
    (``server.pushers``); False: never by this node (no pushers run)."""
    push_allow: tuple[str, ...] = ()
    """Networks (CIDRs) pushes may reach although their addresses are loopback,
    private, link-local...; a metadata address only by an entry of exactly it
    (``push.egress``). Empty: only global addresses."""
    push_secret_dir: Path | None = None
    """Where push targets' signing secrets are, by ``secret_ref`` (``push.secrets``);
    None: a target naming a secret is refused."""
    push_max_connections: int = 256
    """The most connections one push target's client holds (its pool)."""
    engine: EngineSettings = field(
        default_factory=lambda: EngineSettings(data_dir=Path("delayq-data"))
    )

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def peer_tls(self) -> TlsConfig | None:
        """How this node calls other nodes' admin ports: its own certificate, their
        certificates verified with the control plane's CA (``tls.py``); None: plaintext."""
        if self.tls_cert is None:
            return None
        return TlsConfig(ca=self.admin_client_ca, cert=self.tls_cert, key=self.tls_key)

    @property
    def forward_tls(self) -> TlsConfig | None:
        """How this node calls other shards' public ports (a forwarded schedule): as
        ``peer_tls`` when they serve TLS (``public_tls``), else plaintext."""
        return self.peer_tls if self.public_tls else None


# name -> (kind, help). Kinds: str, int, bool, duration, path, flush, levels, attempts,
# networks (comma-separated CIDRs; a list in TOML).
OPTIONS: dict[str, tuple[str, str]] = {
    "data_dir": ("path", "data directory (default ./delayq-data)"),
    "listen": ("str", f"gRPC listen address host:port (default {DEFAULT_ADDRESS})"),
    "metrics_listen": (
        "str",
        f"Prometheus metrics address, or off (default {DEFAULT_HOST}:{METRICS_PORT})",
    ),
    "advertise": ("str", "address clients should dial for this shard (default: --listen)"),
    "admin_listen": (
        "str",
        "the admin service's (control plane, replicas) gRPC address host:port (default "
        f"{DEFAULT_HOST}:{ADMIN_PORT}; another host than loopback without TLS logs a warning)",
    ),
    "rocketmq_listen": (
        "str",
        "serve the RocketMQ 5 gRPC protocol (apache.rocketmq.v2.MessagingService: official "
        f"RocketMQ 5 clients) on host:port, with the public port's TLS (default: off; "
        f"{DEFAULT_HOST}:{ROCKETMQ_PORT} in a cluster's layout)",
    ),
    "rocketmq_dedup_window": (
        "duration",
        "how long the RocketMQ port deduplicates sends by the client's message id (a "
        "retried send is stored once; default 10m; 0: off)",
    ),
    "grpc_server": (
        "str",
        "native or grpcio: what serves the public and RocketMQ ports when they are "
        "plaintext (default native: pygrpc-native's Rust HTTP/2, ~5x less CPU per call; "
        "TLS ports and the admin port are always grpcio's)",
    ),
    "tls_cert": (
        "path",
        "TLS certificate (PEM) of both ports; re-read when it changes (default: plaintext)",
    ),
    "tls_key": ("path", "the TLS certificate's private key (PEM)"),
    "tls_client_ca": (
        "path",
        "CA (PEM) whose client certificates the public port requires (mutual TLS; default: "
        "none asked for)",
    ),
    "public_tls": (
        "bool",
        "with --tls-cert: serve the public and RocketMQ ports over TLS too (default true); "
        "false: only the admin port",
    ),
    "admin_client_ca": (
        "path",
        "CA (PEM) of the control plane: the admin port requires client certificates it "
        "signed, and other nodes' certificates are verified with it (default: --tls-client-ca)",
    ),
    "shard": ("int", "this node's shard: its index in the shard map, encoded in ids (default 0)"),
    "shard_map": (
        "path",
        "the cluster's shard map (JSON; re-read when it changes); without it the node serves "
        "alone and owns every key",
    ),
    "precision": ("duration", "wheel slot length (default 1s; fixed per data dir)"),
    "window": ("duration", "wheel window; later messages are rolled (default 2d)"),
    "flush": ("flush", "async (fsync every interval) or sync (fsync before acking)"),
    "flush_interval": ("duration", "fsync + checkpoint period (default 1s)"),
    "max_body_bytes": ("int", "largest message body (default 262144)"),
    "max_delay": ("duration", "largest delay accepted (default 3650d)"),
    "delay_levels": (
        "levels",
        f"RocketMQ delay levels 1..N, space-separated (default {DEFAULT_DELAY_LEVELS!r})",
    ),
    "retention": ("duration", "how long delivered messages stay receivable (default 7d)"),
    "max_dedup_window": (
        "duration",
        "longest dedup window a keyed schedule may ask for: how long its key stays taken "
        "after acceptance once the message ended (default 7d)",
    ),
    "max_delivery_attempts": (
        "attempts",
        "deliveries a consumer group gets of a message before it goes to the group's "
        "dead-letter topic dlq.<group>: a count, then group=count overrides, e.g. "
        "'16 billing=3' (default 16; 0: no limit)",
    ),
    "slot_limit": ("int", "most messages per wheel slot (default 250000)"),
    "queue_limit": ("int", "bound of the accept queue in messages (default 200000)"),
    "log_format": ("str", "text or json"),
    "log_level": ("str", "debug, info, warning or error"),
    "grace": ("duration", "time in-flight calls get on SIGTERM (default 10s)"),
    "node_name": ("str", "this node's name in its shard, for the control plane (default: address)"),
    "follow": (
        "str",
        "start as a replica of the master whose admin address is host:port (default: start "
        "as master)",
    ),
    "role": (
        "str",
        "master or replica: the role to start in (--follow implies replica; a replica "
        "without it waits for its control plane's Follow or Promote)",
    ),
    "replication": (
        "str",
        "async (ack after the master's write) or sync (after min-insync nodes fsynced it)",
    ),
    "min_insync": ("int", "sync replication: nodes, the master included, that must hold a write"),
    "replication_timeout": (
        "duration",
        "sync replication: how long an ack waits for the in-sync set (default 3s)",
    ),
    "push": (
        "bool",
        "push push groups' messages to their HTTP targets while this node is master "
        "(default true; false: never from this node)",
    ),
    "push_allow": (
        "networks",
        "comma-separated networks pushes may reach although private, loopback or "
        "link-local, e.g. 127.0.0.1/32,10.0.0.0/8 (default: only global addresses; a "
        "metadata address only by an exact /32 or /128)",
    ),
    "push_secret_dir": (
        "path",
        "directory of push targets' signing secrets by ref: a file of whsec_ lines or a "
        "directory of them (a mounted Kubernetes Secret) (default: none)",
    ),
    "push_max_connections": ("int", "most connections to one push target (default 256)"),
}

_ENGINE_KEYS = {
    "data_dir": "data_dir",
    "shard": "shard",
    "precision": "precision_ms",
    "window": "window_ms",
    "flush": "flush",
    "flush_interval": "flush_interval_ms",
    "max_body_bytes": "max_body_bytes",
    "max_delay": "max_delay_ms",
    "delay_levels": "delay_levels_ms",
    "retention": "retention_ms",
    "max_dedup_window": "max_dedup_window_ms",
    "max_delivery_attempts": "delivery_attempts",
    "slot_limit": "slot_limit",
    "queue_limit": "enqueue_queue_messages",
}


def _convert(name: str, value: Any) -> Any:
    kind = OPTIONS[name][0]
    if kind == "levels":
        return parse_delay_levels(str(value))  # its errors name delay_levels already
    if kind == "attempts":
        return AttemptLimits.parse(str(value))  # its errors name the key already
    try:
        if kind == "int":
            return int(value)
        if kind == "duration":
            return parse_duration_ms(str(value))
        if kind == "path":
            return Path(str(value))
        if kind == "flush":
            return FlushPolicy(str(value).lower())
        if kind == "bool":
            return _bool(value)
        if kind == "networks":
            return _networks(value)
        return str(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc


_BOOLS = {"true": True, "on": True, "1": True, "false": False, "off": False, "0": False}


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    try:
        return _BOOLS[str(value).lower()]
    except KeyError:
        raise ValueError(f"use true or false, got {value!r}") from None


def _networks(value: Any) -> tuple[str, ...]:
    """CIDRs from "a,b" text or a TOML list, each checked (``push.egress``)."""
    entries = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return parse_allow(entries)


def _check_tls(values: dict[str, Any]) -> None:
    """The TLS keys go together: a certificate with its key, client CAs only with a
    certificate, and with TLS a CA for the admin port (``tls.py``)."""
    if ("tls_cert" in values) != ("tls_key" in values):
        raise ValueError("tls_cert: give the certificate and its key (tls_key) together")
    tls = "tls_cert" in values
    for name in ("tls_client_ca", "admin_client_ca", "public_tls"):
        if name in values and not tls:
            raise ValueError(f"{name}: only with TLS (tls_cert and tls_key)")
    if values.get("tls_client_ca") and values.get("public_tls") is False:
        raise ValueError("tls_client_ca: the public port serves plaintext (public_tls false)")
    if tls:
        values.setdefault("admin_client_ca", values.get("tls_client_ca"))
        if values["admin_client_ca"] is None:
            raise ValueError(
                "admin_client_ca: with TLS the admin port takes only client certificates "
                "of the control plane's CA: give it (or tls_client_ca)"
            )


def load(
    flags: Mapping[str, Any], env: Mapping[str, str], config_file: Path | None = None
) -> ServerSettings:
    """Merge the sources; raises ValueError naming the bad key."""
    merged: dict[str, Any] = {}
    if config_file is not None:
        try:
            doc = tomllib.loads(config_file.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"config file {config_file}: {exc}") from exc
        unknown = set(doc) - set(OPTIONS)
        if unknown:
            raise ValueError(f"config file {config_file}: unknown keys {sorted(unknown)}")
        merged.update(doc)
    for name in OPTIONS:
        if (v := env.get("DELAYQ_" + name.upper())) is not None:
            merged[name] = v
    merged.update({k: v for k, v in flags.items() if v is not None and k in OPTIONS})
    values = {k: _convert(k, v) for k, v in merged.items()}
    if values.get("log_format", "text") not in ("text", "json"):
        raise ValueError("log_format: use text or json")
    if values.get("grpc_server", "native") not in ("native", "grpcio"):
        raise ValueError("grpc_server: use native or grpcio")
    if values.get("replication", "async") not in ("async", "sync"):
        raise ValueError("replication: use async or sync")
    if values.get("min_insync", 2) < 1:
        raise ValueError("min_insync: must be at least 1")
    if values.get("push_max_connections", 1) < 1:
        raise ValueError("push_max_connections: must be at least 1")
    unset = {
        "listen": None,
        "admin_listen": None,
        "metrics_listen": "off",
        "advertise": "",
        "rocketmq_listen": "",
    }
    for name, value in ((k, values[k]) for k in unset if k in values):
        if value != unset[name]:
            check_address(name, value)
    if values.get("follow"):
        check_address("follow", values["follow"])
    if "role" in values:
        try:
            values["role"] = Role(values["role"])
        except ValueError:
            raise ValueError("role: use master or replica") from None
    _check_tls(values)
    if values.get("follow") and values.get("role") is Role.MASTER:
        raise ValueError("role: a node given --follow starts as a replica, not a master")
    replicated = any(values.get(k) for k in ("node_name", "follow")) or (
        values.get("role") is Role.REPLICA
    )
    if values.get("replication") == "sync":  # the master's own copy is fsynced too
        values["flush"] = FlushPolicy.SYNC
    engine = {_ENGINE_KEYS[k]: v for k, v in values.items() if k in _ENGINE_KEYS}
    engine.setdefault("data_dir", Path("delayq-data"))
    engine["replicated"] = replicated or values.get("replication") == "sync"
    try:
        engine_settings = EngineSettings(**engine)
    except ValueError as exc:
        raise ValueError(f"engine settings: {exc}") from exc
    keys = (
        "listen",
        "admin_listen",
        "rocketmq_listen",
        "grpc_server",
        "tls_cert",
        "tls_key",
        "tls_client_ca",
        "public_tls",
        "admin_client_ca",
        "metrics_listen",
        "advertise",
        "log_format",
        "log_level",
        "shard_map",
        "node_name",
        "follow",
        "role",
        "replication",
        "min_insync",
        "push",
        "push_allow",
        "push_secret_dir",
        "push_max_connections",
    )
    server: dict[str, Any] = {k: values[k] for k in keys if k in values}
    if "replication_timeout" in values:
        server["replication_timeout_s"] = values["replication_timeout"] / 1000
    if "grace" in values:
        server["grace_s"] = values["grace"] / 1000
    server["rocketmq_dedup_window_ms"] = _rocketmq_window(values, engine_settings)
    return ServerSettings(engine=engine_settings, **server)


def _rocketmq_window(values: Mapping[str, Any], engine: EngineSettings) -> int:
    """The RocketMQ port's dedup window: as given, at most ``max_dedup_window``;
    not given, the default or that maximum when it is less."""
    most = engine.max_dedup_window_ms
    window = values.get("rocketmq_dedup_window")
    if window is None:
        return min(ROCKETMQ_DEDUP_WINDOW_MS, most)
    if window > most:
        raise ValueError(
            f"rocketmq_dedup_window: {window} ms is more than max_dedup_window ({most} ms)"
        )
    return int(window)
