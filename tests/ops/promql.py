"""Reading PromQL for the tests of what reads a node's metrics (the dashboard's
panels, the alert rules): the series names an expression selects and the label
names it matches or groups by, against the families a node serves
(``tests/server/test_metric_names.py``'s tables)."""

from __future__ import annotations

import re

from tests.server.test_metric_names import CONDITIONAL, PINNED

__all__ = ["PROMETHEUS_SIDE", "TARGET_LABELS", "label_names", "metric_names", "served_names"]

TARGET_LABELS = {"job", "instance", "shard", "node", "delaytopic", "namespace"}
"""Labels Prometheus puts on every series of a target (docs/operations.md)."""
PROMETHEUS_SIDE = {"up"}
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def served_names() -> dict[str, set[str]]:
    """Every series name a node serves -> its label names."""
    out: dict[str, set[str]] = {}
    for family, (kind, labels) in {**PINNED, **CONDITIONAL}.items():
        names = {
            "counter": [family + "_total"],
            "histogram": [family + s for s in ("_bucket", "_sum", "_count")],
        }.get(kind, [family])
        for name in names:
            out[name] = set(labels) - ({"le"} if not name.endswith("_bucket") else set())
    return out


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects: its identifiers that are not
    functions, aggregations, keywords, label names or inside strings and ranges."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = _GROUPING.sub("", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[m.end() :].lstrip().startswith("(") or m.group() in _KEYWORDS:
            continue
        names.add(m.group())
    return names


def label_names(expr: str) -> set[str]:
    """The label names an expression matches on or groups by."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    names = set()
    for matchers in re.findall(r"\{([^}]*)\}", e):
        names |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    for _, listed in _GROUPING.findall(e):
        names |= {n.strip() for n in listed.split(",") if n.strip()}
    return names
