"""The gRPC server of one shard: the public DelayQ service, health, reflection
and Prometheus metrics, over the engine facade (``delayq.engine``)."""
