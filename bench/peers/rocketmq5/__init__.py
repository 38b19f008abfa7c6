"""The official RocketMQ 5 gRPC client (``Bench5.java``, ``client``) driving what speaks
RocketMQ 5's gRPC protocol: delayq's RocketMQ port (``bench.systems.DelayqRmq5``) and a
real ``rocketmq-proxy`` in local mode (``system``)."""
