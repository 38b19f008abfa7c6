"""The timer pipeline's stages, one module each, and how they run.

``accept`` (the caller's thread: SCHEDULE records into the CommitLog, group
commit in ``groupcommit``), ``link`` (queued messages into the TimerLog and the
wheel), ``scan`` (fire slots as their time comes, roll far ones, walking each
slot's chain with ``chainwalk``), ``release`` (each message at its exact ms).
A stage's thread runs by ``loop``'s rule, logging failures with ``failures``;
``timers.pipeline`` starts them (or pumps them without threads). Stages meet
only through the shard's state (``timers.state``) under its one lock, each
seeing the part it declares as a Protocol of its own (``AcceptState``, ...).
"""
