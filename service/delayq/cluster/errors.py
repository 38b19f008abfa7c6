"""The one error of the local cluster: a cluster that cannot be run or queried as
asked. Its message is one line saying why and what to do; the CLI prints it after
``delayq cluster <command>:`` and exits 2."""

from __future__ import annotations

__all__ = ["ClusterError"]


class ClusterError(Exception):
    """A local cluster that cannot be run or queried as asked (bad options, a port in
    use, a directory in use or holding another topology)."""
