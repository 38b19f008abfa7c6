"""The ``delayq`` command line: serve, client commands, verify."""
