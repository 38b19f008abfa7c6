"""The operations kit against a real Prometheus scraping a real cluster: a 3-shard
``delayq cluster up`` with two nodes a shard in sync replication, under the queue
workload (``bench.queuecheck``: producer, canceller, consumer) and a second
consumer group that stops acking, scraped every second through the supervisor's
``prometheus-targets.json`` and evaluating the chart's alert rules (with their
waits and thresholds cut to test size: ``TEST_TUNING``).

- a SIGKILLed master: ``DelayqNoDeliveringMaster`` goes pending for its shard, and
  is gone once the cluster's keeper has failed the shard over;
- a stopped replica (SIGSTOP) in sync mode: ``DelayqInsyncBelowRequired`` fires for
  its shard's master, and is gone once it runs again;
- a group that stops acking: ``DelayqConsumerGroupBacklogOld`` fires for it (and
  not before it stops);
- push groups of a second topic (a trickle of messages scheduled meanwhile): one
  pushing to a receiver that answers 200, one to a receiver that answers 500 (its
  failures in a row), one whose secret vanished after it was set (``no_secret``),
  so that the *Push* row has something to show;
- then every panel query of the dashboard (``charts/delayq/dashboards/delayq.json``,
  its variables set to "all") has an answer, labelled as its ``by`` says;
- the queue checker: nothing acknowledged lost, nothing early.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench.prometheus import PrometheusProcess
from bench.queuecheck import LazyGroup, QueueLoad, check

from delayq import Client, GroupPolicy, PushTarget
from tests.support.cluster import LocalCluster
from tests.support.pushing import PushLoad, Receiver, secret, write_secret

pytestmark = pytest.mark.timeout(420)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts/delayq/rules/delayq-alerts.yaml"
DASHBOARD = ROOT / "charts/delayq/dashboards/delayq.json"
LAZY_GROUP = "lazy"
PUSHED = "pushed"
"""The push groups' topic."""
TEST_TUNING: dict[str, tuple[str, dict[str, str]]] = {
    # alert -> (its `for` here, {text of its expr: what it becomes here})
    "DelayqNoDeliveringMaster": ("60s", {}),  # pending through the failover, never firing
    "DelayqInsyncBelowRequired": ("2s", {}),
    "DelayqConsumerGroupBacklogOld": ("2s", {"> 300": "> 4"}),
}


def tuned_rules(into: Path) -> Path:
    """The chart's rules with ``TEST_TUNING`` applied (each replacement must hit)."""
    doc = yaml.safe_load(RULES.read_text())
    seen = set()
    for group in doc["groups"]:
        for rule in group["rules"]:
            tuning = TEST_TUNING.get(rule.get("alert", ""))
            if tuning is None:
                continue
            rule["for"], swaps = tuning
            for old, new in swaps.items():
                assert old in rule["expr"], (rule["alert"], old)
                rule["expr"] = rule["expr"].replace(old, new)
            seen.add(rule["alert"])
    assert seen == set(TEST_TUNING), set(TEST_TUNING) - seen
    path = into / "rules.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel, rows' panels included."""
    doc = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p["title"], t["expr"]))

    walk(doc["panels"])
    assert out, "a dashboard without queries"
    return out


def as_prometheus_query(expr: str) -> str:
    """A panel's expr as Prometheus takes it: every variable "all", Grafana's
    intervals as a fixed window."""
    expr = re.sub(r"\$__(rate_)?interval\b", "1m", expr)
    expr = expr.replace("$__range", "5m")
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


def _by_labels(expr: str) -> set[str] | None:
    """The labels the outermost ``by (...)`` keeps, if the query ends on one."""
    found = re.findall(r"\bby\s*\(([^)]*)\)", expr)
    if not found:
        return None
    return {x.strip() for x in found[0].split(",") if x.strip()}


def _alerting(
    prom: PrometheusProcess, name: str, states: set[str], **labels: str
) -> list[dict[str, str]]:
    return [
        lab
        for n, state, lab in prom.alerts()
        if n == name and state in states and all(lab.get(k) == v for k, v in labels.items())
    ]


def _push_groups(c: LocalCluster, ok: Receiver, failing: Receiver, secrets: Path) -> None:
    """The *Push* row's groups (module notes): ``ok``, ``failing``, ``stalled``."""
    with Client(c.address(0)) as client:
        for group, url, ref in (
            ("ok", ok.url(), ""),
            ("failing", failing.url(), ""),
            ("stalled", ok.url("/stalled"), "vanishing"),
        ):
            client.set_group_policy(
                PUSHED, group, GroupPolicy(push=PushTarget(url=url, secret_ref=ref))
            )
    (secrets / "vanishing").unlink()  # read again within seconds: no_secret


def test_dashboard_queries_and_alerts_against_a_real_prometheus(tmp_path: Path) -> None:
    args = ("--replication", "sync", "--min-insync", "2")
    secrets = tmp_path / "secrets"
    write_secret(secrets, "vanishing", secret())
    env = {"DELAYQ_PUSH_ALLOW": "127.0.0.1/32", "DELAYQ_PUSH_SECRET_DIR": str(secrets)}
    with (
        Receiver(tmp_path / "ok") as ok,
        Receiver(tmp_path / "failing", plan=[{"status": 500}]) as failing,
        LocalCluster(tmp_path / "c", shards=3, replicas=2, args=args, env=env) as c,
    ):
        for s in range(3):
            c.wait_insync(s, 2)
        rules = tuned_rules(tmp_path)
        targets = c.dir / "prometheus-targets.json"
        _push_groups(c, ok, failing, secrets)
        with PrometheusProcess(tmp_path / "prom", targets=targets, rules=[rules]) as prom:
            load = QueueLoad(c.address(0), batch=20, pause_s=0.02).start()
            lazy = LazyGroup(c.address(0), load.topic, LAZY_GROUP).start()
            pushed = PushLoad(c.address(0), PUSHED, batch=6, every_s=0.3, ahead_ms=200).start()
            try:
                prom.wait_targets_up(6)
                _backlog_age_alert(prom, lazy, load.topic)
                _no_delivering_master_then_failover(prom, c)
                _insync_alert(prom, c)
                _every_panel_answers(prom)  # after a failover: its panels have one to show
                load.drain(timeout_s=90)
            finally:
                pushed.stop()
                lazy.stop()
                load.stop()
    found = check(load.history)
    assert found["lost"] == 0 and found["early"] == 0, found


def _every_panel_answers(prom: PrometheusProcess) -> None:
    """Every panel's query answers a non-empty vector, labelled as its ``by`` says,
    once the workload has run long enough for rates over a minute to exist."""
    prom.wait(
        "deliveries and acks scraped",
        lambda: (
            prom.query("sum(rate(delayq_acked_total[1m])) > 0")
            and prom.query("sum(rate(delayq_delivered_total[1m])) > 0")
        ),
    )
    empty: dict[str, str] = {}
    for title, expr in panel_queries():
        query = as_prometheus_query(expr)

        def answered(q: str = query) -> list[dict[str, Any]]:
            return prom.query(q)

        try:
            result = prom.wait(f"{title}: {query}", answered, timeout_s=20)
        except AssertionError:
            empty[title] = query
            continue
        keep = _by_labels(query)
        if keep is not None:
            for r in result:
                assert set(r.get("metric", {})) <= keep, (title, query, r)
    assert not empty, f"panels without an answer: {empty}"


def _backlog_age_alert(prom: PrometheusProcess, lazy: LazyGroup, topic: str) -> None:
    # (the push groups of PUSHED leave messages unacked: only the workload's topic counts)
    assert not _alerting(prom, "DelayqConsumerGroupBacklogOld", {"pending", "firing"}, topic=topic)
    lazy.acking = False
    fired = prom.wait(
        "the backlog-age alert for the lazy group",
        lambda: _alerting(
            prom, "DelayqConsumerGroupBacklogOld", {"firing"}, group=LAZY_GROUP, topic=topic
        ),
    )
    assert all(a["severity"] for a in fired) and {a["shard"] for a in fired} <= {"0", "1", "2"}


def _master_node(c: LocalCluster, shard: int) -> int:
    return int(str(c.record(shard)["master"]).rpartition("-")[2])


def _no_delivering_master_then_failover(prom: PrometheusProcess, c: LocalCluster) -> None:
    old = c.record(1)
    c.kill(1, node=_master_node(c, 1))
    prom.wait(
        "the no-deliverer alert pending for shard 1",
        lambda: _alerting(prom, "DelayqNoDeliveringMaster", {"pending"}, shard="1"),
        every_s=0.1,
    )
    c.wait_record(1, lambda r: r["epoch"] > old["epoch"], timeout_s=60)
    prom.wait(
        "the no-deliverer alert resolved after the failover",
        lambda: not _alerting(prom, "DelayqNoDeliveringMaster", {"pending", "firing"}),
    )
    assert not _alerting(prom, "DelayqNoDeliveringMaster", {"firing"})
    c.wait_serving(60)


def _insync_alert(prom: PrometheusProcess, c: LocalCluster) -> None:
    c.wait_insync(2, 2, timeout_s=60)
    replica = 1 - _master_node(c, 2)
    pid = c.node_pid(2, replica)
    os.kill(pid, signal.SIGSTOP)
    try:
        fired = prom.wait(
            "the in-sync alert for shard 2",
            lambda: _alerting(prom, "DelayqInsyncBelowRequired", {"firing"}, shard="2"),
        )
        assert {a["node"] for a in fired} == {f"node-{1 - replica}"}, "named by its master"
    finally:
        os.kill(pid, signal.SIGCONT)
    prom.wait(
        "the in-sync alert resolved once the replica runs again",
        lambda: not _alerting(prom, "DelayqInsyncBelowRequired", {"pending", "firing"}),
        timeout_s=90,
    )
