"""Replication of a shard's CommitLog from its master to its replicas: the whole
data path, on a node.

- ``node``: this node's part in its shard as the admin service drives it (role
  commands with epochs, the master's lease, the in-sync wait, stepping down);
- ``follow``: the replica's side of the stream (hello, cut or chunks, reports);
- ``followers``: the master's book of its followers (positions, live streams, the
  high-water mark over the in-sync set, the wait of a sync ack);
- ``lease``: the tokens that name a node's answers and the deadline a grant gives;
  ``skew``: how far this node's clock may run ahead of its master's;
- ``ports``: what ``node`` and ``follow`` need of the engine (``ReplicaEngine``).

Layers: above the engine, below the server. It drives the engine's
``Replicating`` part through ``ports.ReplicaEngine`` only, and the engine
imports nothing of it: what replication does to a shard's state lives below
the engine, in ``timers.lifecycle`` (``roles``: promote, follow, fence, renew and
the refusals of every acking call; ``replicated``: a replica applies a chunk the
way recovery replays a log tail; ``rewind``: cutting a diverged log back to the
new master's) and ``store.chunks`` (the master's reads of whole records from a
position, within one segment and one epoch). The epoch history itself
(``delayq.epochs``) and the role (``delayq.role``) are leaves: the store and the
timers read them too. The admin service's handlers (``server.admin``) are the
network end of the stream; the control plane that decides roles is
``delayq.control``.
"""
