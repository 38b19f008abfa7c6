"""The Apache RocketMQ 5 peer: a NameServer and a Broker with the timer wheel enabled,
driven through RocketMQ's own Java client (``Driver.java``). ``install`` fetches the
jars with Maven and compiles the driver; ``system`` is the ``bench.compare`` adapter."""
