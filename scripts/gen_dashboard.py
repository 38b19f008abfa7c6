"""Generate delayq's Grafana dashboard, ``charts/delayq/dashboards/delayq.json``,
as code with Grafana's ``grafana-foundation-sdk`` (pinned in the dev extra).

    python scripts/gen_dashboard.py           # write the JSON
    python scripts/gen_dashboard.py --check   # exit 1 when the committed JSON differs

The chart ships the file in a ConfigMap for Grafana's dashboard sidecar
(``metrics.dashboards``), ``make manifests`` copies it to
``manifests/grafana/delayq-dashboard.json``, and ``tests/ops/test_dashboard.py``
checks both against this script's output and every query's metric names against
the families a node serves (``tests/server/test_metric_names.py``).

Query rules:

- every selector is ``{job="delayq", delaytopic=~"$delaytopic", shard=~"$shard"}``
  (``SEL``), plus ``topic=~"$topic"`` where the family has a topic label
  (``TOPIC_SEL``); variables only ever as ``=~`` matchers, whose "All" is ``.*``,
  which also matches a series without the label: a local cluster's targets carry
  no ``delaytopic``;
- a shard's own figures (its pending messages, its counters, its consumer
  groups) are read from its master only (``on_masters``): a replica's engine
  holds a copy, and a sum over all of a shard's nodes would count it twice;
- rates over Grafana's ``$__rate_interval``, no other Grafana macro.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import heatmap as heatmap_model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "charts" / "delayq" / "dashboards" / "delayq.json"

UID = "delayq"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'job="delayq", delaytopic=~"$delaytopic", shard=~"$shard"'
TOPIC_SEL = SEL + ', topic=~"$topic"'
RATE = "[$__rate_interval]"
WIDTH, HEIGHT = 8, 8  # three panels a row


def on_masters(expr: str) -> str:
    """``expr``'s series of the nodes that are their shard's master now (a fenced
    old master that still runs is not)."""
    masters = f'(delayq_role{{{SEL}, role="master"}} == 1)'
    fenced = f"(delayq_fenced{{{SEL}}} == 1)"
    return f"({expr}) and on (instance) ({masters} unless on (instance) {fenced})"


def rate(name: str, sel: str = SEL) -> str:
    """The per-second rate of counter ``name`` over Grafana's rate interval."""
    return f"rate({name}{{{sel}}}{RATE})"


def query(
    expr: str, legend: str, ref: str = "A", fmt: PromQueryFormat | None = None
) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)
    return q.format(fmt) if fmt is not None else q


def _targets(queries: list[tuple[str, str]]) -> list[Builder[variants.Dataquery]]:
    """(expr, legend) pairs as queries A, B, ..."""
    return [query(e, legend, chr(ord("A") + i)) for i, (e, legend) in enumerate(queries)]


def graph(
    title: str,
    description: str,
    queries: list[tuple[str, str]],
    unit: str,
    *,
    stacked: bool = False,
) -> timeseries.Panel:
    """A time series panel from 0 up: lines, or areas stacked to their total."""
    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets(queries))
        .unit(unit)
        .min(0)
        .span(WIDTH)
        .height(HEIGHT)
        .legend(
            common_b.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_b.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if stacked:
        p = p.stacking(common_b.StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(30)
    return p


def table_of(
    title: str,
    description: str,
    expr: str,
    columns: list[str],
    *,
    hidden: dict[str, bool] | None = None,
    rename: dict[str, str] | None = None,
    sort: common_b.TableSortByFieldState | None = None,
) -> Builder[model.Panel]:
    """A table of ``expr``'s instant series, its ``columns`` in order (the time and
    the value hidden unless ``hidden`` says otherwise), ``rename``d, ``sort``ed."""
    options: dict[str, object] = {
        "excludeByName": hidden if hidden is not None else {"Time": True, "Value": True},
        "indexByName": {name: i for i, name in enumerate(columns)},
    }
    if rename:
        options["renameByName"] = rename
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(query(expr, "", fmt=PromQueryFormat.TABLE).instant())
        .with_transformation(model.DataTransformerConfig(id_val="organize", options=options))
    )
    if sort is not None:
        panel = panel.sort_by([sort])
    return panel.span(WIDTH).height(HEIGHT)


def steps(*pairs: tuple[float | None, str]) -> dash.ThresholdsConfig:
    """Absolute thresholds: (from value, colour); the first from None (-inf)."""
    return (
        dash.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=v, color=c) for v, c in pairs])
    )


def single(
    title: str,
    description: str,
    expr: str,
    legend: str,
    unit: str,
    thresholds: dash.ThresholdsConfig,
    no_value: str = "",
) -> stat.Panel:
    """A stat panel: the last value of each series, coloured by thresholds."""
    p = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(query(expr, legend))
        .unit(unit)
        .span(WIDTH)
        .height(HEIGHT)
        .thresholds(thresholds)
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    return p.no_value(no_value) if no_value else p


# -- Timers -------------------------------------------------------------------


def timers() -> list[Builder[model.Panel]]:
    buckets = rate("delayq_lateness_seconds_bucket")
    return [
        graph(
            "Pending messages by topic",
            "Messages scheduled and not yet due (delayq_pending), summed over the "
            "shards' masters, per DelayTopic and topic.",
            [
                (
                    f"sum by (delaytopic, topic) ({on_masters(f'delayq_pending{{{TOPIC_SEL}}}')})",
                    "{{delaytopic}} {{topic}}",
                )
            ],
            "short",
            stacked=True,
        ),
        graph(
            "Messages due within 1m / 1h / 1d",
            "Pending messages due within the next minute, hour and day, overdue ones "
            "included (delayq_due_messages), summed over the shards' masters: the "
            "delivery load coming.",
            [
                (
                    "sum by (delaytopic, within) "
                    f"({on_masters(f'delayq_due_messages{{{TOPIC_SEL}}}')})",
                    "{{delaytopic}} within {{within}}",
                )
            ],
            "short",
        ),
        graph(
            "Release lag by shard",
            "How far the oldest due, unreleased message of each shard's master is behind "
            "now (delayq_release_lag_seconds); grows when releases fall behind.",
            [
                (
                    "max by (delaytopic, shard) "
                    f"({on_masters(f'delayq_release_lag_seconds{{{SEL}}}')})",
                    "{{delaytopic}} shard {{shard}}",
                )
            ],
            "s",
        ),
        graph(
            "Scheduled per second by shard",
            "Messages accepted by Schedule (rate of delayq_scheduled_total) on each "
            "shard's master.",
            [
                (
                    f"sum by (delaytopic, shard) ({on_masters(rate('delayq_scheduled_total'))})",
                    "{{delaytopic}} shard {{shard}}",
                )
            ],
            "mps",
            stacked=True,
        ),
        graph(
            "Delivered per second by shard",
            "Messages released into ready queues when due (rate of "
            "delayq_delivered_total) on each shard's master.",
            [
                (
                    f"sum by (delaytopic, shard) ({on_masters(rate('delayq_delivered_total'))})",
                    "{{delaytopic}} shard {{shard}}",
                )
            ],
            "mps",
            stacked=True,
        ),
        graph(
            "Lateness p50 and p99",
            "Release time minus due time (delayq_lateness_seconds), median and 99th "
            "percentile per DelayTopic; the wheel's precision bounds it when healthy.",
            [
                (
                    f"histogram_quantile(0.5, sum by (delaytopic, le) ({buckets}))",
                    "{{delaytopic}} p50",
                ),
                (
                    f"histogram_quantile(0.99, sum by (delaytopic, le) ({buckets}))",
                    "{{delaytopic}} p99",
                ),
            ],
            "s",
        ),
        heatmap.Panel()
        .title("Lateness distribution")
        .description(
            "Released messages per lateness bucket and second (delayq_lateness_seconds "
            "buckets, every selected shard): where the lateness of releases falls."
        )
        .datasource(DATASOURCE)
        .with_target(query(f"sum by (le) ({buckets})", "{{le}}", fmt=PromQueryFormat.HEATMAP))
        .span(WIDTH)
        .height(HEIGHT)
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit("s"))
        .color(
            heatmap.HeatmapColorOptions()
            .mode(heatmap_model.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .scale(heatmap_model.HeatmapColorScale.EXPONENTIAL)
            .exponent(0.5)
            .steps(64)
        )
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common.HeatmapCellLayout.LE))
        .mode(common.TooltipDisplayMode.SINGLE)
        .show_y_histogram()
        .cell_values(heatmap.CellValues().unit("mps")),
        single(
            "Early deliveries (must be 0)",
            "Messages released before their due time since the nodes started "
            "(delayq_early_total): anything but 0 is a bug to report.",
            f"sum(delayq_early_total{{{SEL}}}) or vector(0)",
            "early",
            "short",
            steps((None, "green"), (1, "red")),
        ),
    ]


# -- Schedules ----------------------------------------------------------------


def schedules() -> list[Builder[model.Panel]]:
    buckets = rate("delayq_schedule_lateness_seconds_bucket")
    by_shard = "{{delaytopic}} shard {{shard}}"
    return [
        graph(
            "Recurring schedules by shard",
            "Recurring schedules each shard's master holds (delayq_schedules: their "
            "plans, paused and ended ones included).",
            [
                (
                    f"sum by (delaytopic, shard) ({on_masters(f'delayq_schedules{{{SEL}}}')})",
                    by_shard,
                )
            ],
            "short",
            stacked=True,
        ),
        graph(
            "Firings and missed firings per second by shard",
            "Nominal times of recurring schedules fired (rate of "
            "delayq_schedule_firings_total: each an ordinary message of its template's "
            "topic) and missed ones skipped under their catch-up policy (rate of "
            "delayq_schedule_missed_total; alert DelayqScheduleFiringsMissed), by shard.",
            [
                (
                    f"sum by (delaytopic, shard) ({rate('delayq_schedule_firings_total')})",
                    "fired " + by_shard,
                ),
                (
                    f"sum by (delaytopic, shard) ({rate('delayq_schedule_missed_total')})",
                    "missed " + by_shard,
                ),
            ],
            "mps",
        ),
        graph(
            "Firing lateness p50 and p99",
            "When a firing was written minus its nominal time "
            "(delayq_schedule_lateness_seconds), median and 99th percentile per "
            "DelayTopic: 0 for firings written ahead (their delivery's lateness is the "
            "Timers row's), more for those caught up after the shard could not fire.",
            [
                (
                    f"histogram_quantile(0.5, sum by (delaytopic, le) ({buckets}))",
                    "{{delaytopic}} p50",
                ),
                (
                    f"histogram_quantile(0.99, sum by (delaytopic, le) ({buckets}))",
                    "{{delaytopic}} p99",
                ),
            ],
            "s",
        ),
    ]


# -- Consumers ----------------------------------------------------------------


def _group_gauge(name: str) -> str:
    return f"sum by (delaytopic, topic, group) ({on_masters(f'{name}{{{TOPIC_SEL}}}')})"


def consumers() -> list[Builder[model.Panel]]:
    legend = "{{delaytopic}} {{topic}} / {{group}}"
    return [
        graph(
            "Consumer backlog by group",
            "Messages delivered to a topic and not yet acked by the group "
            "(delayq_group_backlog_messages): ready plus in flight.",
            [(_group_gauge("delayq_group_backlog_messages"), legend)],
            "short",
        ),
        graph(
            "In flight by group",
            "Messages handed to the group and not acked, their invisibility running "
            "(delayq_group_inflight_messages).",
            [(_group_gauge("delayq_group_inflight_messages"), legend)],
            "short",
        ),
        graph(
            "Ready by group",
            "Messages delivered to a topic and not yet handed to the group "
            "(delayq_group_ready_messages): a growing line is a group not keeping up.",
            [(_group_gauge("delayq_group_ready_messages"), legend)],
            "short",
        ),
        graph(
            "Oldest unacked message age by group",
            "Age since its release of each group's oldest unacked message, the worst "
            "shard's (delayq_group_oldest_unacked_age_seconds; 0: none).",
            [
                (
                    "max by (delaytopic, topic, group) "
                    f"({on_masters(f'delayq_group_oldest_unacked_age_seconds{{{TOPIC_SEL}}}')})",
                    legend,
                )
            ],
            "s",
        ),
        graph(
            "Acks per second by shard",
            "Receipts acked (rate of delayq_acked_total) on each shard's master; no "
            "group label: the groups' split shows in their backlogs.",
            [
                (
                    f"sum by (delaytopic, shard) ({on_masters(rate('delayq_acked_total'))})",
                    "{{delaytopic}} shard {{shard}}",
                )
            ],
            "mps",
            stacked=True,
        ),
        graph(
            "Redeliveries per second by group",
            "Messages handed to a group again after their invisibility ran out (rate of "
            "delayq_group_redelivered_total): consumers that fail or are too slow to ack.",
            [
                (
                    "sum by (delaytopic, topic, group) "
                    f"({on_masters(rate('delayq_group_redelivered_total', TOPIC_SEL))})",
                    legend,
                )
            ],
            "mps",
        ),
        graph(
            "Dead letters per second by group",
            "Messages a group sent to its dead-letter topic dlq.<group> past its last "
            "delivery attempt (rate of delayq_group_dead_lettered_total).",
            [
                (
                    "sum by (delaytopic, topic, group) "
                    f"({on_masters(rate('delayq_group_dead_lettered_total', TOPIC_SEL))})",
                    legend,
                )
            ],
            "mps",
        ),
        graph(
            "Paused groups",
            "1 while a group is paused (delayq_group_paused; `delayq group pause`): it is "
            "handed nothing, and what comes due waits for its resume. A group paused over "
            "an hour fires DelayqConsumerGroupPaused.",
            [
                (
                    "max by (delaytopic, topic, group) "
                    f"({on_masters(f'delayq_group_paused{{{TOPIC_SEL}}}')})",
                    legend,
                )
            ],
            "short",
        ),
        graph(
            "In flight against its limit by group",
            "Messages handed to the group and not acked (delayq_group_inflight_messages) "
            "and the group's in-flight limit, the sum of its shards' shares "
            "(delayq_group_inflight_limit_messages; groups with a limit only). A line "
            "at its limit: the consumers ack no faster than the limit lets them take.",
            [
                (_group_gauge("delayq_group_inflight_messages"), f"{legend} in flight"),
                (f"{_group_gauge('delayq_group_inflight_limit_messages')} > 0", f"{legend} limit"),
            ],
            "short",
        ),
        graph(
            "Throttled receives per second by group",
            "Receives of a group its rate limit cut short (rate of "
            "delayq_group_throttled_total): consumers asking for more than the group's "
            "rate gives. With a growing backlog for 15 m: DelayqConsumerGroupRateLimited.",
            [
                (
                    "sum by (delaytopic, topic, group) "
                    f"({on_masters(rate('delayq_group_throttled_total', TOPIC_SEL))})",
                    legend,
                )
            ],
            "reqps",
        ),
        graph(
            "Retries per second by group and attempt",
            "Retries the group's backoff scheduled after a lapse of invisibility or a "
            "nack (rate of delayq_group_retries_total), by the attempt that failed "
            "(1, 2, 3, 4-7, 8+): a message failing again and again climbs the attempts.",
            [
                (
                    "sum by (delaytopic, topic, group, attempt) "
                    f"({on_masters(rate('delayq_group_retries_total', TOPIC_SEL))})",
                    f"{legend} attempt {{{{attempt}}}}",
                )
            ],
            "mps",
            stacked=True,
        ),
    ]


# -- Push ---------------------------------------------------------------------


def _push(expr: str, by: str = "delaytopic, topic, group, target") -> str:
    """``expr`` summed by a push group's labels, on the masters (only they push)."""
    return f"sum by ({by}) ({on_masters(expr)})"


def push() -> list[Builder[model.Panel]]:
    legend = "{{delaytopic}} {{topic}} / {{group}} {{target}}"
    latency = rate("delayq_push_request_duration_seconds_bucket", TOPIC_SEL)
    lateness = rate("delayq_push_lateness_seconds_bucket", TOPIC_SEL)
    labels = "delaytopic, topic, group, target, le"
    return [
        graph(
            "Push requests per second by outcome",
            "Requests of push groups to their targets (rate of delayq_push_requests_total) "
            "by outcome class: 2xx acks the message; 429 and 503 hold the target off for "
            "its Retry-After; the rest (4xx, 5xx, timeout, connect, tls, refused, other) "
            "spend an attempt and wait out the group's backoff.",
            [
                (
                    _push(
                        rate("delayq_push_requests_total", TOPIC_SEL),
                        "delaytopic, topic, group, outcome",
                    ),
                    "{{delaytopic}} {{topic}} / {{group}} {{outcome}}",
                )
            ],
            "reqps",
            stacked=True,
        ),
        graph(
            "Push request latency p99 by target",
            "A push request's duration from its start to its answer or error "
            "(delayq_push_request_duration_seconds), 99th percentile: a slow target "
            "keeps requests in flight and holds its group's in-flight limit.",
            [(f"histogram_quantile(0.99, {_push(latency, labels)})", legend)],
            "s",
        ),
        graph(
            "Push lateness p50 and p99 by group",
            "A message's first push attempt's start minus its due time "
            "(delayq_push_lateness_seconds): how far the pusher is behind what comes due. "
            "p99 over 5 s for 10 m: DelayqPushLate.",
            [
                (f"histogram_quantile(0.5, {_push(lateness, labels)})", legend + " p50"),
                (f"histogram_quantile(0.99, {_push(lateness, labels)})", legend + " p99"),
            ],
            "s",
        ),
        graph(
            "Push requests in flight by group",
            "Push requests started and not answered (delayq_push_in_flight), against the "
            "group's in-flight limit when it has one.",
            [(_push(f"delayq_push_in_flight{{{TOPIC_SEL}}}"), legend)],
            "short",
        ),
        table_of(
            "Failing push targets",
            "Push targets whose last requests failed in a row (delayq_push_consecutive_failures "
            "> 0), the worst shard's count; 5 or more for 5 m: DelayqPushTargetFailing.",
            "max by (delaytopic, shard, topic, group, target) "
            f"({on_masters(f'delayq_push_consecutive_failures{{{TOPIC_SEL}}}')}) > 0",
            ["delaytopic", "shard", "topic", "group", "target", "Value"],
            hidden={"Time": True},
            rename={"Value": "failures in a row"},
            sort=common_b.TableSortByFieldState().display_name("failures in a row").desc(True),
        ),
        table_of(
            "Stalled push groups",
            "Push groups that send nothing (delayq_push_state refused: the target resolves "
            "only to refused addresses; no_secret: the signing secret is missing on the "
            "node); for 10 m: DelayqPushStalled.",
            "max by (delaytopic, shard, topic, group, target, state) ("
            + on_masters(f'delayq_push_state{{{TOPIC_SEL}, state=~"refused|no_secret"}}')
            + ") == 1",
            ["delaytopic", "shard", "topic", "group", "target", "state"],
        ),
    ]


# -- Replication --------------------------------------------------------------


def replication() -> list[Builder[model.Panel]]:
    by_shard = "{{delaytopic}} shard {{shard}}"
    return [
        table_of(
            "Role per node",
            "Each node's role in its shard now (delayq_role == 1): one master per "
            "shard, the rest replicas.",
            f"max by (delaytopic, shard, node, role) (delayq_role{{{SEL}}} == 1)",
            ["delaytopic", "shard", "node", "role"],
            sort=common_b.TableSortByFieldState().display_name("shard"),
        ),
        graph(
            "Epoch per shard",
            "The shard epoch its nodes are in, the highest (delayq_epoch): a step is a "
            "new master's epoch after a failover or a first election.",
            [(f"max by (delaytopic, shard) (delayq_epoch{{{SEL}}})", by_shard)],
            "none",
        ),
        single(
            "Delivering masters per shard (must be 1)",
            "Nodes of each shard that may ack and deliver now (sum of delayq_delivering): "
            "exactly 1 is healthy; 0 means no master (a failover under way), 2 a "
            "split brain to investigate.",
            f"sum by (delaytopic, shard) (delayq_delivering{{{SEL}}})",
            by_shard,
            "none",
            steps((None, "red"), (1, "green"), (2, "red")),
        ),
        graph(
            "In-sync members vs required",
            "The members of the master's in-sync set it hears from, itself included "
            "(delayq_insync_live_members), and the recorded set (delayq_insync_members), "
            "against the members a sync-mode ack needs (delayq_insync_required; 1 in "
            "async mode): live below required, sync writes wait and fail.",
            [
                (
                    f"max by (delaytopic, shard) (delayq_insync_live_members{{{SEL}}})",
                    by_shard + " live",
                ),
                (
                    f"max by (delaytopic, shard) (delayq_insync_members{{{SEL}}})",
                    by_shard + " recorded",
                ),
                (
                    "max by (delaytopic, shard) "
                    f"({on_masters(f'delayq_insync_required{{{SEL}}}')})",
                    by_shard + " required",
                ),
            ],
            "none",
        ),
        graph(
            "Replication lag (seconds) per replica",
            "Age of the oldest record a master sent that the replica has not written "
            "(delayq_replication_lag_seconds).",
            [
                (
                    "max by (delaytopic, shard, replica) "
                    f"(delayq_replication_lag_seconds{{{SEL}}})",
                    "{{delaytopic}} shard {{shard}} {{replica}}",
                )
            ],
            "s",
        ),
        graph(
            "Replication lag (bytes) per replica",
            "The master's CommitLog end minus the replica's (delayq_replication_lag_bytes).",
            [
                (
                    f"max by (delaytopic, shard, replica) (delayq_replication_lag_bytes{{{SEL}}})",
                    "{{delaytopic}} shard {{shard}} {{replica}}",
                )
            ],
            "bytes",
        ),
        graph(
            "Failovers in the last hour",
            "Promotions of a replica to master in the hour before each point "
            "(increase of delayq_failovers_total over 1h), per shard.",
            [
                (
                    f"sum by (delaytopic, shard) (increase(delayq_failovers_total{{{SEL}}}[1h]))",
                    by_shard,
                )
            ],
            "none",
        ),
        single(
            "Time since last failover",
            "Time since each shard's most recent promotion a running node took "
            "(delayq_last_failover_timestamp_seconds); empty when none has.",
            "time() - max by (delaytopic, shard) "
            f"(delayq_last_failover_timestamp_seconds{{{SEL}}})",
            by_shard,
            "s",
            steps((None, "orange"), (3600, "green")),
            no_value="no failover",
        ),
        graph(
            "Master lease remaining",
            "A master's lease left (delayq_lease_remaining_seconds): it stops acking and "
            "delivering at 0 unless its control plane renews it.",
            [
                (
                    f"min by (delaytopic, shard, node) (delayq_lease_remaining_seconds{{{SEL}}})",
                    "{{delaytopic}} shard {{shard}} {{node}}",
                )
            ],
            "s",
        ),
    ]


# -- Resources ----------------------------------------------------------------


def resources() -> list[Builder[model.Panel]]:
    per_node = "{{node}}"
    return [
        graph(
            "Data bytes by kind",
            "Bytes the data directories' files take on disk, every selected node, by "
            "kind of file (delayq_data_bytes).",
            [(f"sum by (kind) (delayq_data_bytes{{{SEL}}})", "{{kind}}")],
            "bytes",
            stacked=True,
        ),
        graph(
            "Data volume free",
            "Free room on each node's data volume (delayq_data_volume_free_bytes over "
            "delayq_data_volume_size_bytes); Schedule is refused congested at none.",
            [
                (
                    f"100 * delayq_data_volume_free_bytes{{{SEL}}} "
                    f"/ delayq_data_volume_size_bytes{{{SEL}}}",
                    per_node,
                )
            ],
            "percent",
        ),
        graph(
            "Time per fsync",
            "Mean time of a CommitLog fsync on each node (rate of "
            "delayq_fsync_seconds_total over rate of delayq_fsyncs_total).",
            [
                (
                    f"{rate('delayq_fsync_seconds_total')} / {rate('delayq_fsyncs_total')}",
                    per_node,
                )
            ],
            "s",
        ),
        graph(
            "Congestion refusals per second by reason",
            "Schedules refused as congested (rate of delayq_congestion_rejections_total): "
            "queue (the enqueue queue full), slot (a wheel slot full), disk (no space).",
            [
                (
                    f"sum by (delaytopic, reason) ({rate('delayq_congestion_rejections_total')})",
                    "{{delaytopic}} {{reason}}",
                )
            ],
            "reqps",
        ),
        graph(
            "Requests per second by method and code",
            "Calls served, every API of the nodes (rate of "
            "delayq_rpc_duration_seconds_count), by method and status code.",
            [
                (
                    f"sum by (method, code) ({rate('delayq_rpc_duration_seconds_count')})",
                    "{{method}} {{code}}",
                )
            ],
            "reqps",
            stacked=True,
        ),
        graph(
            "Request latency p99 by method",
            "99th percentile of call duration by method (delayq_rpc_duration_seconds); "
            "long-polling receives take up to their wait by design.",
            [
                (
                    "histogram_quantile(0.99, sum by (method, le) "
                    f"({rate('delayq_rpc_duration_seconds_bucket')}))",
                    "{{method}}",
                )
            ],
            "s",
        ),
        graph(
            "Process CPU",
            "CPU time of each node's process per second (rate of "
            "process_cpu_seconds_total): 100% is one core.",
            [(rate("process_cpu_seconds_total"), per_node)],
            "percentunit",
        ),
        graph(
            "Process resident memory",
            "Resident memory of each node's process (process_resident_memory_bytes); "
            "the wheel and the state map are memory-mapped and count here as they are "
            "touched.",
            [(f"process_resident_memory_bytes{{{SEL}}}", per_node)],
            "bytes",
        ),
        graph(
            "Recovery time at the last start",
            "How long each node's recovery took when its process last started "
            "(delayq_recovery_seconds): replaying the CommitLog after the checkpoint.",
            [(f"delayq_recovery_seconds{{{SEL}}}", per_node)],
            "s",
        ),
        graph(
            "Rebalance: messages moved and held keys",
            "Messages a rebalance moved out of and into each shard per second "
            "(delayq_released_total, delayq_imported_total) and the nodes holding "
            "schedules of moving keys back while a rebalance finishes "
            "(delayq_rebalance_holding).",
            [
                (f"sum by (delaytopic, shard) ({rate('delayq_released_total')})", "out {{shard}}"),
                (f"sum by (delaytopic, shard) ({rate('delayq_imported_total')})", "in {{shard}}"),
                (
                    f"sum by (delaytopic, shard) (delayq_rebalance_holding{{{SEL}}})",
                    "holding {{shard}}",
                ),
            ],
            "short",
        ),
    ]


# -- The dashboard ------------------------------------------------------------


def _all() -> model.VariableOption:
    return model.VariableOption(selected=True, text="All", value="$__all")


def variables() -> list[Builder[model.VariableModel]]:
    def label_values(
        name: str, label: str, text: str, sort: model.VariableSort
    ) -> dash.QueryVariable:
        return (
            dash.QueryVariable(label)
            .label(text)
            .datasource(DATASOURCE)
            .query(f"label_values({name}, {label})")
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(sort)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(_all())
        )

    alpha = model.VariableSort.ALPHABETICAL_ASC
    return [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        label_values('delayq_open{job="delayq"}', "delaytopic", "DelayTopic", alpha).description(
            "The DelayTopic (Kubernetes); none on a local cluster, whose series lack the label."
        ),
        label_values(
            'delayq_open{job="delayq", delaytopic=~"$delaytopic"}',
            "shard",
            "Shard",
            model.VariableSort.NUMERICAL_ASC,
        ),
        label_values(
            'delayq_pending{job="delayq", delaytopic=~"$delaytopic", shard=~"$shard"}',
            "topic",
            "Topic",
            alpha,
        ).description("A topic inside the DelayTopic (panels by topic or consumer group)."),
    ]


ROWS = {
    "Timers": timers,
    "Consumers": consumers,
    "Push": push,
    "Schedules": schedules,
    "Replication": replication,
    "Resources": resources,
}


def build() -> model.Dashboard:
    d = (
        dash.Dashboard("delayq")
        .uid(UID)
        .description(
            "delayq's shards: timers, consumer groups, push delivery, schedules, "
            "replication and resources "
            "(generated by scripts/gen_dashboard.py; do not edit by hand)."
        )
        .tags(["delayq"])
        .editable()
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .variables(variables())
    )
    for title, panels in ROWS.items():
        d = d.with_row(dash.Row(title))
        for panel in panels():
            d = d.with_panel(panel)
    board = d.build()
    for i, built in enumerate(board.panels or [], start=1):
        built.id_val = i
    return board


def generate() -> str:
    """The dashboard's JSON, as committed."""
    return json.dumps(build(), cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the committed JSON differs"
    )
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run scripts/gen_dashboard.py")
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
