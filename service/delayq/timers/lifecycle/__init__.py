"""A shard's life on disk: ``opening`` (lock the directory, open the files,
recover), ``recovery`` (derived state brought up to the CommitLog after any
stop), ``checkpointing`` (fsync the derived files, then record how far they go),
``retention`` (which sealed segments may go, and removing them after a
checkpoint); and what replication does to the shard through the engine:
``roles`` (promote, follow, fence, renew: the node's office), ``replicated``
(a replica applies its master's chunk the way recovery replays a log tail),
``rewind`` (cutting a closed data directory back to a diverged log's point).
"""
