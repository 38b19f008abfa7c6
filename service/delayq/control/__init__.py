"""A shard's control plane, shared by the local cluster's supervisor and the
operator: everything that decides who is master and how the shard count changes.

- ``failover``: the failover decision (pure: a view in, one action out) and the
  lease rule, with ``failoverview`` (its input) and ``failoveractions`` (its
  output, and the invariants a history of them keeps); ``founding``: a shard's
  first master (pure); ``membership``: who joins and leaves the recorded in-sync
  set (pure); ``resharding``: a change of the shard count, step by step (pure);
- ``reshardingdriver``: the one driver of such a change, a round at a time,
  over ``reshardinghost.ReshardingHost`` (the local cluster's ``cluster scale``
  and the operator implement it: the map by compare-and-set, shards' nodes, the
  rebalance job, nodes' ``Stats``, progress);
- ``keeper``: the failover loop of one shard (probe, decide, act, again), with
  ``views`` (what it knows of each node, built from admin answers) and
  ``record`` (the shard's replication metadata as the caller keeps it);
- ``admin``: the admin gRPC client; ``stats``: a node's public ``Stats``.

It talks to nodes over gRPC only (never the engine, store or server: an import
contract), so the operator imports it without the engine; where the record is
kept and how a new master is published are the caller's (``cluster.json`` and
``shards.json``; the DelayTopic's status and ConfigMap).
"""
