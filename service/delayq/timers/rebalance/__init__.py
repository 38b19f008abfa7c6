"""A shard's side of moving messages between shards (``delayq-spark
rebalance``): ``snapshot`` (export snapshots read in partitions while the shard
runs) and ``transfer`` (release to another shard, import from one; imported
messages are indexed by their old ids in ``memory.importindex``).
"""
