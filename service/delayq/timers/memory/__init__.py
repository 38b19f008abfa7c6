"""What a shard holds in memory between its stages (pure data structures; not
thread-safe, the shard's lock guards them): the enqueue queue (accepted, not
yet linked: ``enqueue``), the release buffer (fired, not yet released:
``releasebuffer``), topics and their pending counts by due time (``topics``,
``duecounts``), the release lateness histogram (``lateness``), the compaction
blocks held (``blockbook``) and imported messages by their old ids
(``importindex``).
"""
