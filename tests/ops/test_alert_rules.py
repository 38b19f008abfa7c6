"""The alert rules (``charts/delayq/rules/delayq-alerts.yaml``, the one source) under
promtool: ``check rules`` on it and on its ``manifests/`` copy, ``test rules`` on
``tests/ops/rules/*.yaml``. And what promtool does not check: every alert carries a
severity, a summary, a description and a runbook_url whose anchor is its own
section of ``docs/runbook.md``; every expression reads only series a node serves
(``tests/server/test_metric_names.py``'s tables) by their labels or the target
labels; every alert has a test that fires it (its
annotations checked) and one that must stay silent; the ``manifests/`` copy is the
chart's file under its header. (The PrometheusRule the chart renders from it:
``tests/k8s/test_prometheusrule.py``, which needs helm.)

promtool is Debian's ``prometheus`` package (``make system-deps``); without it these
tests fail, they do not skip."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops.promql import PROMETHEUS_SIDE, TARGET_LABELS, label_names, metric_names, served_names

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts/delayq/rules/delayq-alerts.yaml"
COPY = ROOT / "manifests/prometheus/delayq-alerts.yaml"
TESTS = sorted((Path(__file__).parent / "rules").glob("*.yaml"))
RUNBOOK = ROOT / "docs/runbook.md"
RUNBOOK_URL = "https://github.com/delayq/delayq/blob/main/docs/runbook.md"
SEVERITIES = {"critical", "warning"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not installed (Debian package prometheus): run `make system-deps`",
            pytrace=False,
        )
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=120)


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation other
    than ``-`` and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_sections() -> list[str]:
    return re.findall(r"^## (.+?)\s*$", RUNBOOK.read_text(), re.M)


@pytest.mark.parametrize("path", [RULES, COPY], ids=["chart", "manifests"])
def test_promtool_checks_the_rules(path: Path) -> None:
    proc = promtool("check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_unit_tests_pass() -> None:
    assert TESTS, "no promtool tests in tests/ops/rules"
    proc = promtool("test", "rules", *map(str, TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_manifests_copy_is_the_chart_file() -> None:
    header, _, body = COPY.read_text().partition("\n")
    assert header.startswith("# Rendered from charts/delayq"), header
    assert body == RULES.read_text(), "manifests/ is out of date: run `make manifests`"


def test_every_alert_is_named_once() -> None:
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names)), names
    assert all(re.fullmatch(r"Delayq[A-Z][A-Za-z0-9]+", n) for n in names), names


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_every_alert_says_how_bad_what_and_where(alert: dict[str, Any]) -> None:
    assert alert.get("labels", {}).get("severity") in SEVERITIES
    notes = alert.get("annotations", {})
    assert set(notes) >= {"summary", "description", "runbook_url"}
    assert "{{ $labels." in notes["description"], "the description names no label"
    assert notes["runbook_url"] == f"{RUNBOOK_URL}#{github_slug(alert['alert'])}"


def test_every_runbook_anchor_is_a_section_of_the_runbook() -> None:
    anchors = {github_slug(s) for s in runbook_sections()}
    missing = [
        a["alert"]
        for a in alerts()
        if a["annotations"]["runbook_url"].partition("#")[2] not in anchors
    ]
    assert not missing, f"docs/runbook.md has no section for {missing}"


def test_every_alert_section_of_the_runbook_is_an_alert() -> None:
    named = {a["alert"] for a in alerts()}
    stale = [s for s in runbook_sections() if s.startswith("Delayq") and s not in named]
    assert not stale, f"docs/runbook.md has sections of no alert: {stale}"


def test_every_alert_has_a_test_that_fires_it_and_one_that_keeps_it_silent() -> None:
    fired: set[str] = set()
    annotated: set[str] = set()
    silent: set[str] = set()
    for path in TESTS:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["../../../charts/delayq/rules/delayq-alerts.yaml"], path
        for case in doc["tests"]:
            for check in case.get("alert_rule_test", []):
                expected = check.get("exp_alerts") or []
                (fired if expected else silent).add(check["alertname"])
                if any("exp_annotations" in e for e in expected):
                    annotated.add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - fired == set(), "never fired"
    assert names - annotated == set(), "annotations never checked"
    assert names - silent == set(), "never shown silent"
    assert (fired | silent) - names == set(), "tests of alerts that do not exist"


def test_every_expression_reads_served_series_by_their_labels() -> None:
    served = served_names()
    for alert in alerts():
        expr = alert["expr"]
        names = metric_names(expr)
        assert names and names <= set(served) | PROMETHEUS_SIDE, (alert["alert"], names)
        labels = set().union(*(served.get(n, set()) for n in names)) | TARGET_LABELS
        if "histogram_quantile" in expr:
            labels.add("le")
        assert label_names(expr) <= labels, (alert["alert"], label_names(expr) - labels)
