"""Peers that ``bench.compare`` runs as real servers of their own, fetched on first use
(never committed): ``rocketmq`` (an Apache RocketMQ 5 broker with its timer wheel)."""
