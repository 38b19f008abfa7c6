"""delayq's Spark job: reads a cluster's pending messages through each shard's
admin export (a PySpark Python Data Source, ``format("delayq")``) and exports
them as Parquet. Runs in local mode by default and unchanged on a cluster."""
