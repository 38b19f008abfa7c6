"""File I/O of one shard: the segmented logs (CommitLog, TimerLog), the
memory-mapped wheel and state map, ready queues, kept records, checkpoint, and
the reads of the CommitLog a master streams to its replicas (``chunks``).
Nothing here knows about stages or threads; each class says whether it is
thread-safe (none is: the engine lock serialises them). May import formats and
the leaves only."""
