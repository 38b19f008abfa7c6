"""The gRPC server of one shard: the public DelayQ service, health, reflection
and Prometheus metrics, over the engine facade (``delayq.engine``), with the
node's replication (``delayq.replication``). May import the engine and what is
below it; never the cluster, the control plane or the CLI."""
