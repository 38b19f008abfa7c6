"""The timer pipeline's tuning constants, each with the reason for its value.

User-facing knobs (bounds, window, precision) are ``EngineSettings``; these are
the internal batch sizes and pauses that only trade latency against per-call
overhead. Changing one is a performance change: measure it (``bench/``).
"""

from __future__ import annotations

__all__ = [
    "CHECKPOINT_BYTES",
    "CL_WARM_BYTES",
    "ENQUEUE_BATCH",
    "FILL_RECHECK_MS",
    "FIRE_BATCH",
    "HELP_LINK",
    "LINK_GATHER_S",
    "LINK_URGENT_MS",
    "NEAR_SLOTS",
    "RELEASE_BATCH",
    "RELEASE_GATHER_AT",
    "RELEASE_GATHER_S",
    "RELEASE_TIMER_SLACK_NS",
    "SCAN_LEAD_SLOTS",
    "TL_WARM_BYTES",
    "WARM_POLL_S",
]

RELEASE_BATCH = 8192
"""DELIVER records per release write: bounds how long one release step holds the lock."""

FIRE_BATCH = 1024
"""Due rows of its topic one release step hands its firer (recurring schedules'
plans, ``engine.firing``: about 0.1 ms each), the rest in the next steps: bounds
how long a step of many plans due at once holds the lock."""

ENQUEUE_BATCH = 16384
"""Entries linked per lock hold: the link's numpy work is per batch, so big batches
are cheap, but a hold must stay short for the release stage."""

HELP_LINK = 8192
"""Queue length at which a scheduling caller links a batch itself: locks are not
fair, so a busy producer could otherwise starve the link thread."""

LINK_GATHER_S = 0.01
"""The link stage's pause between batches while work keeps coming, so its batches
stay big (its cost is per batch, not per message)."""

LINK_URGENT_MS = 100
"""A message due this soon wakes the link stage at once: its slot may be about to fire."""

RELEASE_GATHER_AT = 64
"""A release step this big (a burst) is followed by a gather of ``RELEASE_GATHER_S``."""

RELEASE_GATHER_S = 0.001
"""In a burst, steps of two ms cost little more than one (a step's fixed cost is
most of its cost at ~100 messages, and the receivers' calls halve too)."""

RELEASE_TIMER_SLACK_NS = 1_000
"""The release thread's timer slack: its waits end at due times and must not run
the kernel's default slack (up to 50 µs) late."""

NEAR_SLOTS = 32
"""Slots this close ahead of the scan also keep their linked messages in memory
(the near rows): firing such a slot needs no chain walk, which cost ~20 ms of the
GIL per slot of a few thousand messages in a server."""

SCAN_LEAD_SLOTS = 2
"""Slots a restart may resume before the last checkpoint's scan cursor: the scan
lead (at most half a slot) plus the slot a late link lands in."""

CHECKPOINT_BYTES = 32 << 20
"""CommitLog growth that triggers a checkpoint before its interval: what a restart
replays stays bounded however fast messages arrive."""

CL_WARM_BYTES = 16 << 20
"""CommitLog bytes read into the page cache ahead of the writer (see store.warmtail)."""

TL_WARM_BYTES = 4 << 20
"""TimerLog bytes read into the page cache ahead of the writer."""

WARM_POLL_S = 1.0
"""How often the warm stage looks for new tails even when nobody signalled one."""

FILL_RECHECK_MS = 1000
"""At most this often a full pass of the wheel lowers the slot-fill bound (see
``accept``): a pass reads every slot."""

REPLICA_PRUNE_MS = 200
"""How often a replica drops from its release buffer what its master delivered."""

BLOCK_RECORD_BYTES = 512 << 10
"""Most bytes of message copies in one BLOCK record (a record holds at least one):
a block's load reads and appends one record a scan step, so this bounds the time
a step holds the lock for it (~1 ms), and a record always fits a replication chunk."""
