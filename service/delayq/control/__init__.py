"""A shard's control plane, shared by the local cluster's supervisor and the
operator: the failover loop of one shard (``keeper``: probe, decide with
``failover.decide``, act), the views it builds from admin answers (``views``),
the in-sync set's rules (``insync``), the admin client (``admin``) and the
shard record (``record``). It talks to nodes over the admin gRPC service only;
where the record is kept and how a new master is published are the caller's
(``cluster.json`` and ``shards.json``; the DelayTopic's status and ConfigMap).
"""
