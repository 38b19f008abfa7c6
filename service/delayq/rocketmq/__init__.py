"""The RocketMQ 5 protocol (``apache.rocketmq.v2.MessagingService``) in front of a
shard: official RocketMQ 5 clients (Java, Python, Go, ...) send delay messages,
recall them and receive them, unchanged, on a port of its own
(``delayq serve --rocketmq-listen``).

A translator and nothing more: RocketMQ requests become the engine's calls
through the server's parts (``server.enginecalls``: the pool, the map's
ownership checks, forwarding; ``server.consuming``'s long-poll loop), and
delayq's answers and errors become RocketMQ's (``status``). It keeps no storage
and no copy of routing, receipts or validation: a RocketMQ queue is a shard, a
receipt handle is delayq's receipt, a recall handle names delayq's id.

Modules: ``status`` (codes, errors), ``properties`` (a RocketMQ message's
properties as delayq headers), ``handles`` (recall handles), ``sessions`` (the
Settings a client is answered on its Telemetry stream), ``routes`` (QueryRoute,
QueryAssignment), ``filters`` (tag expressions), ``servicer`` (the handlers),
``frontend`` (what ``delayq serve`` is handed). ``v2`` is generated from the
vendored protos (``proto/apache/rocketmq/v2``). May import the server and
everything below it; nothing imports it but the CLI.
"""
