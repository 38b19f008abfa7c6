"""Replication of a shard's CommitLog from its master to its replicas.

- ``chunks``: the master's side of the stream: whole records from a position,
  within one segment and one epoch (``read_chunk``);
- ``insync``: the master's book of its followers' positions, the high-water mark
  over the in-sync set, and the wait of a sync ack (``Followers``).

The network loops (the admin service's ``Replicate`` and a replica's follower)
are the server's; a replica applies what it receives through the engine
(``timers.replicated``).
"""
