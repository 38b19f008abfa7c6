"""The RocketMQ 5 protocol (``apache.rocketmq.v2.MessagingService``) in front of a
shard: official RocketMQ 5 clients (Java, Python, Go, ...) send delay messages,
recall them and receive them, unchanged, on a port of its own
(``delayq serve --rocketmq-listen``).

A translator and nothing more: RocketMQ requests become calls of the node's
calls layer (``server.calls.Calls``, the one delayq's own servicer uses: the
pool, the map's ownership checks, forwarding, the long poll) in the engine's
own values, and their answers and errors become RocketMQ's, converted once each
way. It keeps no storage and no copy of routing, receipts or validation: a
RocketMQ queue is a shard, a receipt handle is delayq's receipt, a recall
handle names delayq's id.

Modules: ``servicer`` (the handlers, each a call of one activity), the
activities ``clients`` (routes, heartbeats, Telemetry sessions), ``sending``
(send, recall), ``receiving`` (the long poll) and ``settling`` (ack,
invisibility, dead letters, renewals); ``checks`` (what the RocketMQ side
checks), ``convert`` (RocketMQ's messages to the engine's values and back),
``status`` (every reply's status: codes, errors, outcomes); ``properties`` (a
RocketMQ message's properties as delayq headers), ``handles`` (recall handles),
``sessions`` (the Settings a client is answered on its Telemetry stream),
``routes`` (QueryRoute, QueryAssignment), ``passing`` (keyed sends of other
shards passed on to their owners), ``filters`` (tag expressions),
``renewals`` (auto-renewed receives), ``names`` (``%DLQ%``), ``frontend`` (what
``delayq serve`` is handed). ``v2`` is generated from the
vendored protos (``proto/apache/rocketmq/v2``). May import the server and
everything below it; nothing imports it but the CLI.
"""
