"""The Grafana dashboard (``charts/delayq/dashboards/delayq.json``): the committed
file is what ``scripts/gen_dashboard.py`` writes, and so is its copy in
``manifests/grafana/``; every panel has a title, a description, the dashboard's
data source and queries; every query reads only families a node serves
(``tests/server/test_metric_names.py``'s tables) by their labels or the target
labels, uses the variables as ``=~`` matchers and no Grafana macro but
``$__rate_interval``, and parses as PromQL (Debian's ``promtool``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.ops.promql import PROMETHEUS_SIDE, TARGET_LABELS, label_names, metric_names, served_names
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts/delayq/dashboards/delayq.json"
COPY = ROOT / "manifests/grafana/delayq-dashboard.json"

VARIABLES = {"datasource", "delaytopic", "shard", "topic"}


def _generator() -> ModuleType:
    return load_script("gen_dashboard")


def _board() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _panels() -> list[dict[str, Any]]:
    return [p for p in _board()["panels"] if p["type"] != "row"]


def _exprs() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in _panels() for t in p["targets"]]


def test_committed_dashboard_is_what_the_generator_writes() -> None:
    gen = _generator()
    assert DASHBOARD.read_text() == gen.generate(), "run scripts/gen_dashboard.py"
    assert gen.main(["--check"]) == 0
    assert COPY.read_text() == DASHBOARD.read_text(), "run scripts/render_manifests.py"


def test_the_rows_and_every_panel_have_what_a_reader_needs() -> None:
    board = _board()
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Timers", "Consumers", "Push", "Schedules", "Replication", "Resources"]
    panels = _panels()
    assert len(panels) >= 30
    titles = [p["title"] for p in panels]
    assert len(set(titles)) == len(titles), "titles are unique"
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids)
    for p in panels:
        assert p["title"] and len(p.get("description", "")) > 20, p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
        assert all(t["datasource"] == p["datasource"] for t in p["targets"]), p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs), p["title"]
        pos = p["gridPos"]
        assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0, p["title"]
    kinds = {p["type"] for p in panels}
    assert {"timeseries", "stat", "heatmap", "table"} <= kinds


def test_the_variables_select_by_target_labels_and_may_match_none() -> None:
    templating = {v["name"]: v for v in _board()["templating"]["list"]}
    assert set(templating) == VARIABLES
    assert templating["datasource"]["type"] == "datasource"
    assert templating["datasource"]["query"] == "prometheus"
    wanted = {"delaytopic": "delayq_open", "shard": "delayq_open", "topic": "delayq_pending"}
    for name, family in wanted.items():
        v = templating[name]
        assert v["type"] == "query" and v["datasource"]["uid"] == "${datasource}"
        assert re.fullmatch(rf"label_values\({family}\{{[^}}]*\}}, {name}\)", v["query"])
        # All is `.*`: also the empty value of a series without the label (a
        # local cluster has no delaytopic)
        assert v["includeAll"] and v["allValue"] == ".*" and v["multi"], name
        assert v["current"]["value"] == "$__all", name


def test_queries_read_only_served_families_by_their_labels() -> None:
    served = served_names()
    used: set[str] = set()
    for title, expr in _exprs():
        names = metric_names(expr)
        assert names, (title, expr)
        unknown = names - set(served) - PROMETHEUS_SIDE
        assert not unknown, f"{title}: not served: {sorted(unknown)}"
        labels = set().union(*(served.get(n, set()) for n in names)) | TARGET_LABELS
        if "histogram_quantile" in expr:
            labels.add("le")
        assert label_names(expr) <= labels, f"{title}: {sorted(label_names(expr) - labels)}"
        used |= names
    # the contract's headline families are all on the board
    for family in (
        "delayq_pending",
        "delayq_due_messages",
        "delayq_lateness_seconds_bucket",
        "delayq_early_total",
        "delayq_group_oldest_unacked_age_seconds",
        "delayq_group_paused",
        "delayq_group_inflight_limit_messages",
        "delayq_group_throttled_total",
        "delayq_group_retries_total",
        "delayq_push_requests_total",
        "delayq_push_lateness_seconds_bucket",
        "delayq_push_consecutive_failures",
        "delayq_delivering",
        "delayq_last_failover_timestamp_seconds",
        "delayq_rpc_duration_seconds_bucket",
        "process_resident_memory_bytes",
    ):
        assert family in used, family


def test_the_metric_name_reader() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (method, le) (rate(a_bucket{job="x", le=~"1"}[5m])))'
        ' / on (instance) group_left (role) b and c{x="d{e}"} or vector(0)'
    )
    assert metric_names(expr) == {"a_bucket", "b", "c"}
    assert label_names(expr) == {"job", "le", "method", "instance", "role", "x"}


def test_variables_are_regex_matchers_and_the_only_macro_is_the_rate_interval() -> None:
    for title, expr in _exprs():
        for name in re.findall(r"\$\{?(\w+)", expr):
            assert name in VARIABLES | {"__rate_interval"}, (title, name)
        uses = re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"\$(\w+)"', expr)
        assert all(op == "=~" and label == var for label, op, var in uses), (title, uses)
        assert len(uses) == expr.count('"$'), (title, expr)
        assert 'job="delayq"' in expr, title


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    """As the test against a running Prometheus substitutes them: variables by
    ``.*``, the rate interval by a duration."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: run `make system-deps` (Debian's prometheus package)")
    rules = []
    for i, (_, expr) in enumerate(_exprs()):
        e = expr.replace("$__rate_interval", "1m")
        for var in VARIABLES:
            e = e.replace(f"${var}", ".*")
        rules.append({"record": f"delayq:dashboard_query_{i}", "expr": e})
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout
