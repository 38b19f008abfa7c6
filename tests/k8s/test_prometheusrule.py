"""The chart's PrometheusRule: only with ``metrics.prometheusRule.enabled``, its
``spec.groups`` exactly those of ``charts/delayq/rules/delayq-alerts.yaml`` (the one
source; promtool checks and tests it in ``tests/ops/``), its labels the chart's and
``metrics.prometheusRule.labels``."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

from tests.k8s.support.controlplane import require_binary
from tests.k8s.support.kube import ROOT

CHART = ROOT / "charts/delayq"
KUBE_VERSION = "1.35.4"


def rendered(*values: str) -> list[dict[str, Any]]:
    cmd = [require_binary("helm"), "template", "t", str(CHART), "--namespace", "ops"]
    cmd += ["--kube-version", KUBE_VERSION, *values]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_no_prometheusrule_by_default() -> None:
    assert "PrometheusRule" not in {d["kind"] for d in rendered()}


def test_the_prometheusrule_holds_the_rules_file() -> None:
    docs = rendered(
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack",
    )  # fmt: skip
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "ops"
    labels = rule["metadata"]["labels"]
    assert labels["release"] == "kube-prometheus-stack"
    assert labels["app.kubernetes.io/instance"] == "t"
    source = yaml.safe_load((CHART / "rules/delayq-alerts.yaml").read_text())
    assert rule["spec"] == {"groups": source["groups"]}
