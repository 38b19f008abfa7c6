"""The timer pipeline of one shard: accept, link, scan (fire and roll, load
compaction blocks), release, checkpoint and retention, each a module, over one
``ShardState`` that recovery returns. It knows nothing of the delivery side
beyond ``ports.Deliveries``; the engine facade (``delayq.engine``) joins the two."""
