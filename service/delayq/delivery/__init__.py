"""The delivery side of one shard: ready queues per topic, consumer groups,
receipts. Released messages come in through ``Consumers.deliver``; no I/O but
through ``store``."""
