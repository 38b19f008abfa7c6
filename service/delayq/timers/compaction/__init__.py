"""Compaction blocks: far-future messages taken out of the roll cycle
(``adding``: the admin ``AddBlock``, from ``delayq-spark compact``), kept in
block files and loaded into the wheel when their block comes within a window
(``loading``); the shard's record of its blocks is ``memory.blockbook``.
"""
