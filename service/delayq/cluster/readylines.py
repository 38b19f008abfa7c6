"""The lines ``delayq cluster up`` prints on stdout (pure): one ``node_line`` as
each node first serves, then one ``ready_line`` once all do. Scripts and tests
wait for the line starting with ``READY_PREFIX``; nothing else goes to stdout
(the supervisor's log goes to stderr).

Invariants: a node's line is printed once a run of the supervisor, before the
ready line; the ready line is printed once.
"""

from __future__ import annotations

from .certs import LocalTls
from .layout import Layout, Node

__all__ = ["READY_PREFIX", "node_line", "ready_line"]

READY_PREFIX = "cluster up: "
"""Starts the line printed once every node serves (``ready_line``)."""


def node_line(node: Node, pid: int) -> str:
    """``node shard-0/node-0 serving on 127.0.0.1:7500 (metrics 127.0.0.1:7501,
    admin 127.0.0.1:7502, rocketmq 127.0.0.1:7503, pid 4243, log
    DIR/shard-0/node-0.log)``"""
    return (
        f"node {node.label} serving on {node.address} (metrics {node.metrics_address}, "
        f"admin {node.admin_address}, rocketmq {node.rocketmq_address}, pid {pid}, "
        f"log {node.log_path})"
    )


def ready_line(layout: Layout) -> str:
    """``cluster up: 3 shard(s), 1 node(s) each, map DIR/shards.json`` (and with TLS
    ``, TLS: CA DIR/tls/ca.crt``)"""
    tls = f", TLS: CA {LocalTls(layout.tls_dir).ca}" if layout.tls else ""
    return (
        f"{READY_PREFIX}{layout.shards} shard(s), {layout.replicas} node(s) each, "
        f"map {layout.map_path}{tls}"
    )
