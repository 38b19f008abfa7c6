"""Replication of a shard's CommitLog from its master to its replicas: the whole
data path, on a node.

- ``node``: this node's part in its shard as the admin service drives it (role
  commands with epochs, the master's lease, the in-sync wait, stepping down);
- ``transitions``: the role changes themselves on the shard's state (promote,
  follow, fence, renew; refusing writes unless still the master in office);
- ``chunks``: the master's side of the stream (whole records from a position,
  within one segment and one epoch); ``follow``: the replica's side (hello, cut or
  chunks, reports); ``apply``: a replica applies a chunk the way recovery replays a
  log tail; ``rewind``: cutting a diverged log back to the new master's;
- ``followers``: the master's book of its followers (positions, live streams, the
  high-water mark over the in-sync set, the wait of a sync ack);
- ``lease``: the tokens that name a node's answers and the deadline a grant gives;
  ``skew``: how far this node's clock may run ahead of its master's;
- ``ports``: what ``node`` and ``follow`` need of the engine (``ReplicaEngine``).

Layers: below the engine facade (which calls ``transitions``, ``apply``,
``rewind`` and ``chunks``; ``node`` and ``follow`` reach the engine through
``ports`` only), above the timers and the store. The epoch history itself
(``delayq.epochs``) and the role (``delayq.role``) are leaves: the store and the
timers read them too. The admin service's handlers (``server.admin``) are the
network end of the stream; the control plane that decides roles is
``delayq.control``.
"""
