"""The PySpark Python Data Source ``delayq``: a cluster's pending messages as a
DataFrame (``shards.SCHEMA``), one Spark partition per export partition of every
shard (a CommitLog range of one shard's snapshot).

    spark.dataSource.register(DelayqDataSource)
    df = spark.read.format("delayq").option("server", "127.0.0.1:7500").load()

Options (any case): ``server`` (any node of the cluster), ``partitionBytes`` (log bytes per
partition, 0: the shards' default), ``batchRows``, and ``snapshots``: snapshots
already begun (``ShardSnapshot.dumps``), so that a driver that ends them itself
reads exactly those. Without it the reader begins one per shard when Spark plans
the read; those end by themselves once idle (the shards' ``idle_ms``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from . import shards

__all__ = ["DelayqDataSource"]


class _Part(InputPartition):
    def __init__(self, part: shards.Partition) -> None:
        super().__init__(part)
        self.part = part


class DelayqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "delayq"

    def schema(self) -> str:
        return shards.SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader({k.lower(): v for k, v in self.options.items()})  # case-insensitive


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        given = options.get("snapshots")
        if given:
            self.snaps = shards.ShardSnapshot.loads(given)
        else:
            server = options.get("server")
            if not server:
                raise ValueError("the delayq data source needs option 'server' (host:port)")
            route = shards.shard_map(server)
            self.snaps = shards.begin(route, int(options.get("partitionbytes", "0")))
        self.batch_rows = int(options.get("batchrows", "0"))

    def partitions(self) -> Sequence[InputPartition]:
        return [_Part(p) for s in self.snaps for p in s.parts()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Part)
        yield from shards.read(partition.part, self.batch_rows)
