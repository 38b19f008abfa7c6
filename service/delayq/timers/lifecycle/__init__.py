"""A shard's life on disk: ``opening`` (lock the directory, open the files,
recover), ``recovery`` (derived state brought up to the CommitLog after any
stop), ``checkpointing`` (fsync the derived files, then record how far they go),
``retention`` (which sealed segments may go, and removing them after a
checkpoint).
"""
