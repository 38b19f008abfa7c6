"""The delivery side of one shard: ready queues per topic, consumer groups,
receipts (``receiptcheck``: which receipts of a call check). Released messages
come in through ``Consumers.stage`` and ``StagedRows.index`` (it never calls
back into the timers); no I/O but through ``store``. May import types, store,
formats and the leaves; never the timers (a sibling) or anything above."""
