"""How big the long tests run: their CI size by default, their long size under
``pytest --long`` (``make test-long``), or exactly what an environment variable
says (``DELAYQ_FAILOVER_KILLS=50``), which wins over both.

A test with a long form carries the ``long`` marker (``pytest -m long --long``
runs just those, at their long size); at either size it asserts the same
properties, the long size only runs the loop further. ``--long`` sets
``DELAYQ_TEST_LONG=1`` before any test module is imported, so module constants
may call :func:`size`, and xdist workers inherit it."""

from __future__ import annotations

import os

LONG_ENV = "DELAYQ_TEST_LONG"


def long_run() -> bool:
    """Whether this run asked for the long sizes."""
    return os.environ.get(LONG_ENV) == "1"


def size(env: str, ci: int, long: int) -> int:
    """``$env`` if set, else ``long`` in a long run, else ``ci``."""
    given = os.environ.get(env)
    if given is not None:
        return int(given)
    return long if long_run() else ci
