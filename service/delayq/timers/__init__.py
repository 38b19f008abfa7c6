"""The timer pipeline of one shard (RocketMQ 5's timer store rebuilt): messages
accepted into the CommitLog, linked into the TimerLog and the mapped wheel,
fired slot by slot, released at their exact millisecond.

- ``stages/``: the pipeline's stages (accept, link, scan, release), how a stage's
  thread runs, group commit and the chain walk; ``pipeline`` runs them all (one
  thread each, or pumped), the checkpoint with them;
- ``memory/``: what the shard holds in memory between stages (the enqueue
  queue, the release buffer, topics and their due counts, the lateness
  histogram, the compaction blocks held, the index of imported ids);
- ``lifecycle/``: opening a shard, recovery, checkpoints, retention;
- ``compaction/``: far-future messages taken out of the roll cycle into blocks
  and loaded back (the shard's side of ``delayq-spark compact``);
- ``rebalance/``: export snapshots, releases to another shard and imports from
  one (the shard's side of ``delayq-spark
  rebalance``);
- ``state`` (the shard's files, lock, wake-ups and shared state), ``byid``
  (cancel, reschedule, lookup by id), ``timingwheel`` (the one module of slot
  arithmetic, pure), ``columns`` (a validated batch as the accept stage takes
  it), ``deliveries`` (what the pipeline needs of the delivery side), ``tuning``.

It knows nothing of the delivery side beyond ``deliveries.Deliveries``, nor of
client input (validated above it, at the engine's boundary); the engine facade
(``delayq.engine``) joins the two, and replication, above the engine, drives its
roles (``lifecycle.roles``) and its copy of a master's log
(``lifecycle.replicated``) through it.
"""
