"""Render manifests/ from charts/delayq (``make manifests``): plain YAML for
``kubectl apply`` users.

  manifests/crds/          the chart's CRDs, as they are
  manifests/operator.yaml  the namespace delayq-system and the chart's templates
  manifests/examples/      a small DelayTopic (the chart's example template)
  manifests/prometheus/    the chart's alert rules (rules/delayq-alerts.yaml) as a plain
                           Prometheus rules file, for a Prometheus without its operator

``--check`` renders into memory and fails if manifests/ differs (CI runs it
through tests/k8s/test_chart.py). Needs the helm binary of ``make k8s-tools``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts/delayq"
OUT = ROOT / "manifests"
NAMESPACE = "delayq-system"
KUBE_VERSION = "1.35.4"
HELM = Path(os.environ.get("DELAYQ_K8S_BIN", Path.home() / ".cache/delayq-k8s/bin")) / "helm"
RULES = "rules/delayq-alerts.yaml"
HEADER = "# Rendered from charts/delayq by `make manifests`; do not edit by hand.\n"


def helm_template(*args: str) -> str:
    cmd = [str(HELM), "template", "delayq", str(CHART), "--kube-version", KUBE_VERSION, *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def render() -> dict[str, str]:
    """Path under manifests/ -> content."""
    files = {
        f"crds/{crd.name}": HEADER + crd.read_text()
        for crd in sorted((CHART / "crds").glob("*.yaml"))
    }
    namespace = f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"
    files["operator.yaml"] = HEADER + "---\n" + namespace + helm_template("--namespace", NAMESPACE)
    files["examples/delaytopic.yaml"] = HEADER + helm_template(
        "--set", "example.enabled=true", "--show-only", "templates/example-delaytopic.yaml"
    )
    # not through helm: the rules file as it is (its {{ $labels }} are Prometheus')
    files["prometheus/delayq-alerts.yaml"] = HEADER + (CHART / RULES).read_text()
    return files


def main() -> int:
    check = "--check" in sys.argv[1:]
    files = render()
    stale = []
    for rel, text in files.items():
        path = OUT / rel
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    extra = (
        {str(p.relative_to(OUT)) for p in OUT.rglob("*.yaml") if p.is_file()} - set(files)
        if OUT.exists()
        else set()
    )
    if check and (stale or extra):
        print(f"manifests/ is out of date ({sorted(stale + list(extra))}): run `make manifests`")
        return 1
    for rel in sorted(extra):
        (OUT / rel).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
