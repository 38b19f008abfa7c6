"""The failover decision's inputs (``delayq.control.failover``): rule 8 and the views it
refuses, and the module's purity."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from delayq import role
from delayq.control import failover, failoveractions, failoverview
from delayq.control.failover import (
    NodeStatus,
    ShardView,
)
from tests.control.failover_views import master, node, view

# -- rule 8 and the inputs -----------------------------------------------------------


def test_views_refuse_what_cannot_be() -> None:
    with pytest.raises(ValueError, match="no status for the recorded master 'z'"):
        view(master(), master="z")
    with pytest.raises(ValueError, match="a name given twice"):
        view(master(), node("a"))
    with pytest.raises(ValueError, match="epoch must be >= 1"):
        view(master(), epoch=0)
    with pytest.raises(ValueError, match="min_insync must be >= 1"):
        view(master(), min_insync=0)
    with pytest.raises(ValueError, match="flushed 5 beyond log_end 4"):
        node("b", end=4, flushed=5)
    with pytest.raises(ValueError, match="role must be one of"):
        node("b", role="leader")
    with pytest.raises(ValueError, match="epoch must be an integer >= 0"):
        node("b", epoch=-1)


def test_sets_given_as_other_iterables_become_frozensets() -> None:
    v = ShardView(
        epoch=1,
        master="a",
        insync=["a", "b"],  # type: ignore[arg-type]
        nodes=[NodeStatus(name="a", reachable=True, seen_ms=0, insync={"a"})],  # type: ignore[arg-type]
        now_ms=0,
    )
    assert v.insync == frozenset({"a", "b"}) and v.nodes[0].insync == frozenset({"a"})
    assert hash(v) == hash(dataclasses.replace(v))


def test_the_modules_are_pure() -> None:
    """Stdlib only (and the pure leaf ``delayq.role``, itself stdlib only, and each
    other), no clock, no I/O: the imports are a closed list."""

    def imported(module: object) -> set[str | None]:
        tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
        return {
            alias.name if isinstance(n, ast.Import) else n.module
            for n in ast.walk(tree)
            if isinstance(n, ast.Import | ast.ImportFrom)
            for alias in n.names
        }

    stdlib = {"__future__", "collections.abc", "dataclasses", "typing"}
    pieces = {"role", "failoverview", "failoveractions"}
    for module in (failover, failoverview, failoveractions):
        assert imported(module) <= stdlib | pieces, module.__name__
    assert imported(role) <= {"__future__", "enum"}
