"""``delayq cluster up`` whose nodes are run by another program: the same options
and supervisor, with ``Supervisor.python`` set to the first argument (a script
taking the nodes' ``python -m delayq.cli.main serve ...`` command line)::

    python stand_in_supervisor.py NODE_PROGRAM --dir DIR --replicas 3 ...
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from delayq.cluster import command, supervisor


def main(argv: list[str]) -> int:
    node_program, rest = argv[0], argv[1:]
    parser = argparse.ArgumentParser(prog="delayq")
    command.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["cluster", "up", *rest])
    real = supervisor.Supervisor.__init__

    def init(self: supervisor.Supervisor, layout: Any, **kw: Any) -> None:
        real(self, layout, python=node_program, **kw)

    supervisor.Supervisor.__init__ = init  # type: ignore[method-assign]
    return command.run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
