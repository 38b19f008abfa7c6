"""The local cluster: several shards as real ``delayq serve`` processes on one
machine, supervised in the foreground (``delayq cluster up``) and queried
(``delayq cluster status``), for development and tests.

One concept a module: ``layout`` (pure: names, directories, ports, the shard
map), ``restarts`` (pure: the crash-loop back-off), ``clusterfile`` (pure: the
``cluster.json`` record), ``freeports`` (whether the TCP ports are free),
``probe`` (one node's health and stats over gRPC), ``supervisor`` (``cluster
up``: the run and its nodes' starts and exits) with ``takeover`` (the lock and
what a run takes over in DIR), ``nodeprocess`` (a node's command line, process
and stop), ``registry`` (the shard map and ``cluster.json`` as the supervisor
keeps them), ``keepers`` (the failover loops' wiring) and ``readylines`` (what
it prints), ``scaling`` (``cluster scale``: the resharding driver's host) with
``scalejob`` (the rebalance job as a subprocess), ``certs`` (the local CA),
``statusreport`` (the ``cluster status`` report), ``command`` (the CLI group).
``delayq top`` is the package ``top``, above this one.
Nodes run as processes: nothing here imports the engine or the server; the
client's wire code and the shard-map schema are all it shares with them.
"""

from .errors import ClusterError
from .layout import Layout, Node, plan

__all__ = ["ClusterError", "Layout", "Node", "plan"]
