"""The ``delayq`` command line: serve, client commands, verify, the local
cluster. The top layer: it may import every package below it (server, cluster,
verify, client) and nothing imports it."""
