"""The five dashboards as code (grafana-foundation-sdk 0.0.21, Grafana 12, schemaVersion 42).

Every panel and variable reads the ``serve`` views (migration 0009) through the warehouse
datasource (``DATASOURCE_UID``) as Grafana's read-only role. The SQL uses only Grafana's
``$__timeFilter(col)``, ``$__timeGroupAlias(col,'<literal>')``, ``$__timeFrom()``,
``$__timeTo()`` and ``${var:sqlstring}``: the dashboard tests expand exactly these and run every
query against a real warehouse, hostile group names included.

``python -m groupscope.serve.grafana.dashboards DIR`` writes ``DIR/<slug>.json``; the committed
``dashboards/*.json`` are that output, and a test fails when they differ from ``build_all()``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import (
    barchart,
    piechart,
    stat,
    statetimeline,
    statushistory,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import piechart as piechart_models

from groupscope.serve.grafana import DASHBOARDS, DATASOURCE_TYPE, DATASOURCE_UID
from groupscope.serve.grafana.sqlquery import SQL

OVERVIEW = "groupscope-overview"
GROUP = "groupscope-group"
REBALANCES = "groupscope-rebalances"
STRATEGIES = "groupscope-strategies"
COORDINATORS = "groupscope-coordinators"

TAGS = ["groupscope", "kafka", "consumer-groups"]

# The SQL filters on the dashboard variables: always through :sqlstring (a quoted literal,
# quotes doubled; multi-values comma-joined), never spliced raw.
CLUSTER = "cluster = ${cluster:sqlstring}"
GROUP_ID = "group_id = ${group:sqlstring}"
# An array, not IN (...): a group without topics (or a name Grafana escapes into no match)
# leaves the variable empty, and ARRAY[]::text[] still parses where IN () does not.
TOPICS = "topic = ANY(ARRAY[${topic:sqlstring}]::text[])"

RECORDS = "short"  # lag in records: counted, SI-abbreviated; titles and axes say "records"
SECONDS = "s"

PanelBuilder = cogbuilder.Builder[dm.Panel]


def _ds() -> common.DataSourceRef:
    return common.DataSourceRef(type_val=DATASOURCE_TYPE, uid=DATASOURCE_UID)


# -- colours, mappings, links ---------------------------------------------------------------

def _thresholds(*steps: tuple[float | None, str]) -> dashboard_builders.ThresholdsConfig:
    return (dashboard_builders.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE)
            .steps([dm.Threshold(value, color) for value, color in steps]))


GREEN_ONLY = (None, "green")
LAG_RECORDS_THRESHOLDS = (GREEN_ONLY, (10_000.0, "orange"), (100_000.0, "red"))  # lag_records_high
LAG_SECONDS_THRESHOLDS = (GREEN_ONLY, (60.0, "orange"), (600.0, "red"))  # lag_seconds_high
ANY_IS_RED = (GREEN_ONLY, (1.0, "red"))
ANY_IS_ORANGE = (GREEN_ONLY, (1.0, "orange"))
# data_loss_forecast: red below its 1 h threshold, orange below 6 h (a base of red first).
LOSS_THRESHOLDS = ((None, "red"), (3600.0, "orange"), (21600.0, "green"))


def _value_map(colors: dict[str, tuple[str, str]]) -> list[dm.ValueMapping]:
    """Value -> (display text, colour)."""
    return [dm.ValueMap({value: dm.ValueMappingResult(text=text, color=color, index=i)
                         for i, (value, (text, color)) in enumerate(colors.items())})]


STATUS_TEXT = _value_map({
    "OK": ("OK", "green"), "WARN": ("WARN", "orange"), "ERR": ("ERR", "red"),
    "STALL": ("STALL", "red"), "STOP": ("STOP", "red"), "REWIND": ("REWIND", "purple"),
})
# serve views' status_level: 0 OK, 1 WARN, 2 ERR.
STATUS_LEVEL = _value_map({"0": ("OK", "green"), "1": ("WARN", "orange"), "2": ("ERR", "red")})
# Partition status as a number (the statushistory panel's SQL maps it so).
PARTITION_STATUS_LEVEL = _value_map({
    "0": ("OK", "green"), "1": ("WARN", "orange"), "2": ("REWIND", "purple"),
    "3": ("STALL", "red"), "4": ("STOP", "dark-red"),
})
STATE_TEXT = _value_map({
    "Stable": ("Stable", "green"), "Empty": ("Empty", "orange"),
    "PreparingRebalance": ("PreparingRebalance", "blue"),
    "CompletingRebalance": ("CompletingRebalance", "blue"),
    "Assigning": ("Assigning", "blue"), "Reconciling": ("Reconciling", "blue"),
    "Dead": ("Dead", "red"), "Unknown": ("Unknown", "text"),
    # A streams group whose internal topics are missing (KIP-1071).
    "NotReady": ("Not Ready", "red"),
})
# The group kinds (raw.consumer_groups.group_type), named as a newcomer knows them.
KIND_TEXT = _value_map({
    "classic": ("classic", "text"), "consumer": ("consumer (KIP-848)", "text"),
    "share": ("share (queue)", "purple"), "streams": ("streams (Kafka Streams)", "blue"),
    "unknown": ("unknown", "text"),
})
SEVERITY_TEXT = _value_map({
    "critical": ("critical", "red"), "warning": ("warning", "orange"), "info": ("info", "blue"),
})
INCIDENT_STATE_TEXT = _value_map({"firing": ("firing", "red"), "pending": ("pending", "orange")})
BOOL_TEXT = _value_map({"true": ("yes", "green"), "false": ("no", "red")})


def _group_link() -> dict[str, object]:
    """A data link to Group detail carrying the row's cluster and group (and the time range)."""
    return {
        "title": "Group detail: ${__data.fields.group_id}",
        "url": (f"/d/{GROUP}/{DASHBOARDS[GROUP]}"
                "?var-cluster=${__data.fields.cluster:percentencode}"
                "&var-group=${__data.fields.group_id:percentencode}&${__url_time_range}"),
    }


def _cluster_link(uid: str, title: str) -> dict[str, object]:
    return {"title": title,
            "url": (f"/d/{uid}/{DASHBOARDS[uid]}"
                    "?var-cluster=${__data.fields.cluster:percentencode}&${__url_time_range}")}


def _dashboard_links() -> list[cogbuilder.Builder[dm.DashboardLink]]:
    """Every dashboard links to the others (by tag), keeping the time range and variables."""
    return [dashboard_builders.DashboardLink("groupscope").type(dm.DashboardLinkType.DASHBOARDS)
            .tags(["groupscope"]).as_dropdown(True).include_vars(True).keep_time(True)]


# -- field overrides -------------------------------------------------------------------------

def _prop(prop_id: str, value: object) -> dm.DynamicConfigValue:
    return dm.DynamicConfigValue(prop_id, value)


def _column(name: str, *, label: str | None = None, unit: str | None = None,
            mappings: list[dm.ValueMapping] | None = None,
            thresholds: Sequence[tuple[float | None, str]] | None = None,
            background: bool = False, links: list[dict[str, object]] | None = None,
            hidden: bool = False) -> tuple[str, list[dm.DynamicConfigValue]]:
    props: list[dm.DynamicConfigValue] = []
    if label:
        props.append(_prop("displayName", label))
    if unit:
        props.append(_prop("unit", unit))
    if mappings:
        props.append(_prop("mappings", mappings))
    if thresholds:
        props.append(_prop("thresholds", _thresholds(*thresholds).build()))
    if background or mappings or thresholds:
        props.append(_prop("custom.cellOptions",
                           {"type": "color-background" if background else "color-text"}))
    if links:
        props.append(_prop("links", links))
    if hidden:
        props.append(_prop("custom.hidden", True))
    return name, props


def _with_columns(panel: table.Panel,
                  columns: Sequence[tuple[str, list[dm.DynamicConfigValue]]]) -> table.Panel:
    for name, props in columns:
        panel = panel.override_by_name(name, props)
    return panel


# -- panels ----------------------------------------------------------------------------------

def _stat(title: str, sql: str, *, unit: str = "short", description: str = "",
          thresholds: Sequence[tuple[float | None, str]] = (GREEN_ONLY,),
          mappings: list[dm.ValueMapping] | None = None,
          fields: str = "", graph: bool = False) -> stat.Panel:
    panel = (stat.Panel().title(title).description(description)
             .with_target(SQL("A", sql)).unit(unit)
             .thresholds(_thresholds(*thresholds))
             .color_mode(common.BigValueColorMode.BACKGROUND if mappings
                         else common.BigValueColorMode.VALUE)
             .graph_mode(common.BigValueGraphMode.AREA if graph else common.BigValueGraphMode.NONE)
             .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])
                             .values(False).fields(fields)))
    if mappings:
        panel = panel.mappings(mappings)
    return panel


# A table's cluster (hidden) and group columns, the group linking to Group detail.
def _group_columns() -> list[tuple[str, list[dm.DynamicConfigValue]]]:
    return [_column("cluster", hidden=True),
            _column("group_id", label="group", links=[_group_link()])]


def _table(title: str, sql: str, *, description: str = "",
           columns: Sequence[tuple[str, list[dm.DynamicConfigValue]]] = (),
           sort_by: str | None = None, desc: bool = True) -> table.Panel:
    panel = (table.Panel().title(title).description(description).with_target(SQL("A", sql))
             .cell_height(common.TableCellHeight.SM).filterable(True))
    if sort_by:
        panel = panel.sort_by([common_builders.TableSortByFieldState()
                               .display_name(sort_by).desc(desc)])
    return _with_columns(panel, columns)


def _timeseries(title: str, sql: str, *, unit: str, axis_label: str = "",
                description: str = "", bars: bool = False, stacked: bool = False,
                thresholds: Sequence[tuple[float | None, str]] | None = None
                ) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(description)
             .with_target(SQL("A", sql, "time_series"))
             .unit(unit).axis_label(axis_label).fill_opacity(10 if not bars else 80)
             .line_width(1).span_nulls(False)
             .legend(common_builders.VizLegendOptions()
                     .display_mode(common.LegendDisplayMode.TABLE)
                     .placement(common.LegendPlacement.RIGHT).show_legend(True)
                     .calcs(["lastNotNull", "max"]))
             .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                      .sort(common.SortOrder.DESCENDING)))
    if bars:
        panel = panel.draw_style(common.GraphDrawStyle.BARS)
    if stacked:
        panel = panel.stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL))
    if thresholds:
        panel = (panel.thresholds(_thresholds(*thresholds))
                 .thresholds_style(common_builders.GraphThresholdsStyleConfig()
                                   .mode(common.GraphThresholdsStyleMode.LINE)))
    return panel


def _state_timeline(title: str, sql: str, *, mappings: list[dm.ValueMapping],
                    description: str = "") -> statetimeline.Panel:
    return (statetimeline.Panel().title(title).description(description)
            .with_target(SQL("A", sql, "table"))
            .mappings(mappings).thresholds(_thresholds(GREEN_ONLY))
            .color_scheme(dashboard_builders.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
            .show_value(common.VisibilityMode.AUTO).merge_values(True).fill_opacity(80)
            .line_width(0).row_height(0.9))


def _status_history(title: str, sql: str, *, mappings: list[dm.ValueMapping],
                    description: str = "") -> statushistory.Panel:
    return (statushistory.Panel().title(title).description(description)
            .with_target(SQL("A", sql, "time_series"))
            .mappings(mappings).thresholds(_thresholds(GREEN_ONLY))
            .color_scheme(dashboard_builders.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
            .show_value(common.VisibilityMode.NEVER).fill_opacity(80).row_height(0.9))


def _barchart(title: str, sql: str, *, x_field: str, unit: str = "short",
              description: str = "", stacked: bool = False,
              horizontal: bool = False) -> barchart.Panel:
    panel = (barchart.Panel().title(title).description(description).with_target(SQL("A", sql))
             .x_field(x_field).unit(unit).show_value(common.VisibilityMode.AUTO)
             .fill_opacity(80)
             .orientation(common.VizOrientation.HORIZONTAL if horizontal
                          else common.VizOrientation.AUTO)
             .legend(common_builders.VizLegendOptions().show_legend(True)
                     .display_mode(common.LegendDisplayMode.LIST)
                     .placement(common.LegendPlacement.BOTTOM)))
    if stacked:
        panel = panel.stacking(common.StackingMode.NORMAL)
    return panel


def _piechart(title: str, sql: str, *, description: str = "") -> piechart.Panel:
    return (piechart.Panel().title(title).description(description).with_target(SQL("A", sql))
            .unit("short").pie_type(piechart_models.PieChartType.DONUT)
            .reduce_options(common_builders.ReduceDataOptions().calcs(["sum"]).values(False))
            .display_labels([piechart_models.PieChartLabels.PERCENT])
            .legend(_pie_legend()))


def _pie_legend() -> piechart.PieChartLegendOptions:
    return (piechart.PieChartLegendOptions().show_legend(True)
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.RIGHT)
            .values([piechart_models.PieChartLegendValues.VALUE,
                      piechart_models.PieChartLegendValues.PERCENT]))


# -- variables -------------------------------------------------------------------------------

def _variable(name: str, label: str, sql: str, *, multi: bool = False,
              include_all: bool = False) -> dashboard_builders.QueryVariable:
    return (dashboard_builders.QueryVariable(name).label(label).datasource(_ds())
            .query(sql).definition(sql).allow_custom_value(False)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_CASE_INSENSITIVE_ASC)
            .multi(multi).include_all(include_all))


def cluster_variable() -> dashboard_builders.QueryVariable:
    return _variable("cluster", "Cluster", "SELECT cluster FROM serve.clusters ORDER BY cluster")


def group_variable() -> dashboard_builders.QueryVariable:
    return _variable("group", "Group", "SELECT group_id FROM serve.groups WHERE " + CLUSTER
                     + " ORDER BY group_id")


def topic_variable() -> dashboard_builders.QueryVariable:
    # Include-all without a custom all value: Grafana expands "All" to every option, each
    # quoted by :sqlstring and comma-joined into the ARRAY[...] of TOPICS.
    return _variable("topic", "Topic", "SELECT topic FROM serve.group_topics WHERE " + CLUSTER
                     + " AND " + GROUP_ID + " ORDER BY topic", multi=True, include_all=True)


# -- assembling ------------------------------------------------------------------------------

Placed = tuple[PanelBuilder, int, int]  # panel, width, height


def _layout(panels: Sequence[Placed]) -> list[dm.Panel]:
    """Left to right, wrapping at Grafana's 24 columns; ids in reading order."""
    out: list[dm.Panel] = []
    x = y = row_height = 0
    for number, (builder, width, height) in enumerate(panels, start=1):
        if x + width > 24:
            x, y, row_height = 0, y + row_height, 0
        panel = builder.build()
        panel.id_val = number
        panel.grid_pos = dm.GridPos(h=height, w=width, x=x, y=y)
        panel.datasource = _ds()
        out.append(panel)
        x += width
        row_height = max(row_height, height)
    return out


def _dashboard(uid: str, title: str, description: str,
               variables: Sequence[dashboard_builders.QueryVariable],
               panels: Sequence[Placed], time_from: str = "now-6h") -> dict[str, Any]:
    board = (dashboard_builders.Dashboard(title).uid(uid).description(description)
             .tags(TAGS).editable().time(time_from, "now").refresh("1m")
             .timezone("browser").tooltip(dm.DashboardCursorSync.CROSSHAIR)
             .links(_dashboard_links()).variables(list(variables)))
    model = board.build()
    model.panels = list(_layout(panels))
    plain: dict[str, Any] = json.loads(json.dumps(model, cls=JSONEncoder, sort_keys=True))
    return plain


# -- Overview --------------------------------------------------------------------------------

def overview() -> dict[str, Any]:
    groups_by_status = _stat(
        "Groups by status",
        "SELECT count(*) FILTER (WHERE status = 'OK') AS \"OK\",\n"
        "       count(*) FILTER (WHERE status = 'WARN') AS \"WARN\",\n"
        "       count(*) FILTER (WHERE status = 'ERR') AS \"ERR\"\n"
        "FROM serve.group_status_latest WHERE " + CLUSTER,
        description="Groups of the cluster at its newest status snapshot, by status "
                    "(ERR: a partition stopped or stalled; WARN: lag growing).",
    ).override_by_name("OK", [_prop("color", {"mode": "fixed", "fixedColor": "green"})]) \
     .override_by_name("WARN", [_prop("color", {"mode": "fixed", "fixedColor": "orange"})]) \
     .override_by_name("ERR", [_prop("color", {"mode": "fixed", "fixedColor": "red"})]) \
     .color_mode(common.BigValueColorMode.BACKGROUND)
    panels: list[Placed] = [
        (groups_by_status, 8, 5),
        (_stat("Open alert incidents",
               "SELECT count(*) FILTER (WHERE state = 'firing') AS firing,\n"
               "       count(*) FILTER (WHERE state = 'pending') AS pending\n"
               "FROM serve.open_alert_incidents WHERE " + CLUSTER,
               thresholds=ANY_IS_RED,
               description="Incidents of the alert rules not yet resolved (groupscope alerts "
                           "list)."), 4, 5),
        (_stat("Rebalances, last 24 h",
               "SELECT count(*) AS rebalances FROM serve.rebalance_timeline\n"
               "WHERE " + CLUSTER + "\n"
               "  AND time > $__timeTo()::timestamptz - interval '24 hours'\n"
               "  AND time <= $__timeTo()::timestamptz",
               thresholds=(GREEN_ONLY, (24.0, "orange"), (240.0, "red")),
               description="Rebalances of all the cluster's groups in the 24 hours up to the "
                           "end of the time range."), 4, 5),
        (_stat("Last snapshot age",
               "SELECT last_snapshot_age_s AS last_snapshot,\n"
               "       last_complete_snapshot_age_s AS last_complete_snapshot\n"
               "FROM serve.collector_health WHERE " + CLUSTER,
               unit=SECONDS, thresholds=(GREEN_ONLY, (120.0, "orange"), (300.0, "red")),
               description="Seconds since the collector's newest snapshot, and its newest "
                           "complete one (collector_stale alerts on the latter)."), 4, 5),
        (_stat("Snapshot completeness, 24 h",
               "SELECT completeness_24h AS completeness FROM serve.collector_health WHERE "
               + CLUSTER,
               unit="percentunit", thresholds=((None, "red"), (0.9, "orange"), (0.99, "green")),
               description="Share of the last 24 hours' snapshots that were complete (every "
                           "group and partition read)."), 4, 5),
        (_table("Clusters",
                "SELECT cluster, groups, partitions, last_snapshot_time, last_snapshot_age_s,\n"
                "       last_snapshot_complete, completeness_24h, errors_24h\n"
                "FROM serve.collector_health ORDER BY cluster",
                description="Every cluster the collector watches, and its collector's health.",
                columns=[
                    _column("cluster", links=[_cluster_link(OVERVIEW, "Overview of this cluster")]),
                    _column("last_snapshot_time", label="last snapshot"),
                    _column("last_snapshot_age_s", label="age", unit=SECONDS,
                            thresholds=(GREEN_ONLY, (120.0, "orange"), (300.0, "red"))),
                    _column("last_snapshot_complete", label="complete", mappings=BOOL_TEXT),
                    _column("completeness_24h", label="completeness 24 h", unit="percentunit",
                            thresholds=((None, "red"), (0.9, "orange"), (0.99, "green"))),
                    _column("errors_24h", label="collection errors 24 h",
                            thresholds=ANY_IS_ORANGE),
                ]), 24, 6),
        (_stat("Groups by kind",
               "SELECT count(*) FILTER (WHERE group_type = 'classic') AS classic,\n"
               "       count(*) FILTER (WHERE group_type = 'consumer') AS \"consumer (KIP-848)\",\n"
               "       count(*) FILTER (WHERE group_type = 'share') AS \"share (queues)\",\n"
               "       count(*) FILTER (WHERE group_type = 'streams')\n"
               "         AS \"streams (Kafka Streams)\"\n"
               "FROM serve.groups WHERE " + CLUSTER,
               description="The cluster's groups at its newest snapshot, by kind: classic "
                           "and consumer-protocol (KIP-848) consumer groups, share groups "
                           "(KIP-932: queues, records acknowledged one by one) and streams "
                           "groups (KIP-1071: Kafka Streams applications)."), 8, 6),
        (_table("Queues and Streams applications",
                "SELECT cluster, group_id, kind, state, members, partitions, lag_records,\n"
                "       subtopologies, active_tasks, standby_tasks, warmup_tasks,\n"
                "       snapshot_time\n"
                "FROM serve.kind_groups_now WHERE " + CLUSTER + "\n"
                "ORDER BY kind, lag_records DESC NULLS LAST, group_id",
                description="Share groups (queues) and streams groups (Kafka Streams "
                            "applications) at the newest snapshot. Lag of a share group: "
                            "records not yet acknowledged (the broker's count); of a streams "
                            "group: its committed offsets against the high watermarks. "
                            "Partitions: with a share start offset, or committed. Click a "
                            "group for its own panels.",
                columns=[
                    *_group_columns(),
                    _column("kind", mappings=KIND_TEXT, background=True),
                    _column("state", mappings=STATE_TEXT),
                    _column("lag_records", label="lag (records)", unit=RECORDS,
                            thresholds=LAG_RECORDS_THRESHOLDS),
                    _column("active_tasks", label="active tasks"),
                    _column("standby_tasks", label="standby tasks"),
                    _column("warmup_tasks", label="warm-up tasks"),
                    _column("snapshot_time", label="snapshot"),
                ]), 16, 6),
        (_table("Groups",
                "SELECT cluster, group_id, group_type AS kind, status, lag_records,\n"
                "       CASE WHEN lag_unknown_partitions > 0 THEN lag_lower_bound END\n"
                "         AS lag_at_least,\n"
                "       max_time_lag_s, time_lag_kind, members, state, worst_reason,\n"
                "       snapshot_time\n"
                "FROM serve.group_status_latest WHERE " + CLUSTER + "\n"
                "ORDER BY status_level DESC, lag_records DESC NULLS LAST, group_id",
                description="Every group at the newest status snapshot, worst first. Click a "
                            "group for its detail. An empty lag is unknown: some partition's "
                            "high watermark or log start was not read (its leader down, a "
                            "timeout, no access); \"lag at least\" is then the sum over the "
                            "partitions that were read, a lower bound.",
                columns=[
                    *_group_columns(),
                    _column("kind", mappings=KIND_TEXT),
                    _column("status", mappings=STATUS_TEXT, background=True),
                    _column("lag_records", label="lag (records)", unit=RECORDS,
                            thresholds=LAG_RECORDS_THRESHOLDS),
                    _column("lag_at_least", label="lag at least (partitions unread)",
                            unit=RECORDS),
                    _column("max_time_lag_s", label="max time lag", unit=SECONDS,
                            thresholds=LAG_SECONDS_THRESHOLDS),
                    _column("time_lag_kind", label="time lag is"),
                    _column("state", mappings=STATE_TEXT),
                    _column("worst_reason", label="why"),
                    _column("snapshot_time", label="snapshot"),
                ]), 24, 10),
        (_table("Top lagging groups, in records",
                "SELECT cluster, group_id, lag_records, status\n"
                "FROM serve.top_lagging_groups WHERE " + CLUSTER + " AND lag_records > 0\n"
                "ORDER BY rank_by_records, group_id LIMIT 10",
                columns=[
                    *_group_columns(),
                    _column("lag_records", label="lag (records)", unit=RECORDS,
                            thresholds=LAG_RECORDS_THRESHOLDS, background=True),
                    _column("status", mappings=STATUS_TEXT),
                ]), 12, 8),
        (_table("Top lagging groups, in seconds",
                "SELECT cluster, group_id, max_time_lag_s, time_lag_kind, status\n"
                "FROM serve.top_lagging_groups WHERE " + CLUSTER + " AND max_time_lag_s > 0\n"
                "ORDER BY rank_by_seconds, group_id LIMIT 10",
                description="Time lag: the age of the next record to consume, exact where the "
                            "record was sampled, else estimated from the high-watermark history.",
                columns=[
                    *_group_columns(),
                    _column("max_time_lag_s", label="max time lag", unit=SECONDS,
                            thresholds=LAG_SECONDS_THRESHOLDS, background=True),
                    _column("time_lag_kind", label="time lag is"),
                    _column("status", mappings=STATUS_TEXT),
                ]), 12, 8),
        (_timeseries("Lag per group (records)",
                     "SELECT time, group_id AS metric, lag_records\n"
                     "FROM serve.group_lag_history\n"
                     "WHERE " + CLUSTER + " AND $__timeFilter(time)\nORDER BY 1",
                     unit=RECORDS, axis_label="records"), 12, 8),
        (_timeseries("Max time lag per group",
                     "SELECT time, group_id AS metric,\n"
                     "       coalesce(time_lag_exact_s, time_lag_estimated_s) AS time_lag_s\n"
                     "FROM serve.group_lag_history\n"
                     "WHERE " + CLUSTER + " AND $__timeFilter(time)\nORDER BY 1",
                     unit=SECONDS, axis_label="seconds", thresholds=LAG_SECONDS_THRESHOLDS,
                     description="Exact where sampled, else estimated."), 12, 8),
        (_table("Open alert incidents",
                "SELECT cluster, group_id, severity, state, rule, topic, started_at, open_for_s,\n"
                "       value, threshold, runbook\n"
                "FROM serve.open_alert_incidents WHERE " + CLUSTER + "\n"
                "ORDER BY severity_level DESC, started_at",
                columns=[
                    *_group_columns(),
                    _column("severity", mappings=SEVERITY_TEXT, background=True),
                    _column("state", mappings=INCIDENT_STATE_TEXT),
                    _column("started_at", label="since"),
                    _column("open_for_s", label="open for", unit=SECONDS),
                ]), 24, 7),
        (_table("Rebalances, last 24 h, by group",
                "SELECT cluster, group_id, count(*) AS rebalances,\n"
                "       coalesce(sum(partitions_moved), 0) AS partitions_moved,\n"
                "       max(time) AS last_rebalance\n"
                "FROM serve.rebalance_timeline\n"
                "WHERE " + CLUSTER + "\n"
                "  AND time > $__timeTo()::timestamptz - interval '24 hours'\n"
                "  AND time <= $__timeTo()::timestamptz\n"
                "GROUP BY cluster, group_id ORDER BY rebalances DESC, group_id",
                columns=[
                    *_group_columns(),
                    _column("rebalances", thresholds=(GREEN_ONLY, (10.0, "orange"),
                                                      (100.0, "red"))),
                    _column("partitions_moved", label="partitions moved"),
                    _column("last_rebalance", label="last"),
                ]), 12, 8),
        (_timeseries("Collector: snapshots and errors",
                     "SELECT time, groups, partitions, errors\n"
                     "FROM serve.collector_snapshots\n"
                     "WHERE " + CLUSTER + " AND $__timeFilter(time)\nORDER BY 1",
                     unit="short", axis_label="count",
                     description="What each snapshot read; errors are per-group or "
                                 "per-partition failures the snapshot recorded."), 12, 8),
    ]
    return _dashboard(OVERVIEW, "groupscope: Overview",
                      "Every group of a cluster at a glance, of every kind (consumer groups, "
                      "share groups, Kafka Streams applications): status, lag, incidents, "
                      "rebalances and the collector's health.",
                      [cluster_variable()], panels)


# -- Group detail ----------------------------------------------------------------------------

def group_detail() -> dict[str, Any]:
    where = CLUSTER + " AND " + GROUP_ID
    panels: list[Placed] = [
        (_stat("Status",
               "SELECT status_level AS status FROM serve.group_status_latest WHERE " + where,
               mappings=STATUS_LEVEL,
               thresholds=(GREEN_ONLY, (1.0, "orange"), (2.0, "red")),
               description="At the newest status snapshot. ERR: a partition stopped or "
                           "stalled; WARN: lag growing."), 4, 4),
        (_stat("Lag (records)",
               "SELECT lag_records FROM serve.group_status_latest WHERE " + where,
               unit=RECORDS, thresholds=LAG_RECORDS_THRESHOLDS,
               description="No value: the lag is unknown, some partition's high watermark "
                           "or log start was not read (its leader down, a timeout, no "
                           "access). The Overview's Groups table shows the lag of the "
                           "partitions that were read, as a lower bound."), 4, 4),
        (_stat("Max time lag",
               "SELECT max_time_lag_exact_s AS exact, max_time_lag_estimated_s AS estimated\n"
               "FROM serve.group_status_latest WHERE " + where,
               unit=SECONDS, thresholds=LAG_SECONDS_THRESHOLDS,
               description="Exact: the age of the record at the committed offset (sampled). "
                           "Estimated: interpolated over the high-watermark history."), 6, 4),
        (_stat("Members",
               "SELECT members FROM serve.group_status_latest WHERE " + where,
               thresholds=((None, "red"), (1.0, "green"))), 3, 4),
        (_stat("Rebalances in range",
               "SELECT count(*) AS rebalances FROM serve.rebalance_timeline\n"
               "WHERE " + where + " AND $__timeFilter(time)",
               thresholds=(GREEN_ONLY, (10.0, "orange"), (100.0, "red"))), 3, 4),
        (_stat("Partitions not OK",
               "SELECT stall_partitions + stop_partitions AS stalled_or_stopped,\n"
               "       rewind_partitions AS rewound, warn_partitions AS warn\n"
               "FROM serve.group_status_latest WHERE " + where,
               thresholds=ANY_IS_RED), 4, 4),
        (_table("Now",
                "SELECT state, group_type AS kind, assignor, coordinator, partitions,\n"
                "       worst_topic, worst_partition, worst_reason, snapshot_time\n"
                "FROM serve.group_status_latest WHERE " + where,
                columns=[_column("state", mappings=STATE_TEXT, background=True),
                         _column("kind", mappings=KIND_TEXT),
                         _column("worst_reason", label="why")]), 24, 3),
        (_table("Likely causes",
                "SELECT time, rule, state, rank, cause, evidence, since, started_at\n"
                "FROM serve.group_alert_causes\n"
                "WHERE " + where + " AND (state <> 'resolved' OR $__timeFilter(time))\n"
                "ORDER BY started_at DESC, rank",
                description="Why the group is in trouble: the probable causes of each of its "
                            "alerts, best first, as the alert evaluation ranked them from the "
                            "group's history (members that crashed or left, a record it is "
                            "stuck on, rebalances, coordinator moves, production against "
                            "consumption, rewinds). The same lines as the notification's "
                            "\"Likely cause\".",
                columns=[_column("state", mappings=INCIDENT_STATE_TEXT),
                         _column("time", label="evaluated"),
                         _column("started_at", label="alert since")]), 24, 6),
        (_timeseries("Time until data loss (forecast)",
                     "SELECT time, series AS metric, loss_in_s\n"
                     "FROM serve.loss_forecast_history\n"
                     "WHERE " + where + " AND " + TOPICS + " AND loss_in_s IS NOT NULL"
                     " AND $__timeFilter(time)\nORDER BY 1",
                     unit=SECONDS, axis_label="seconds", thresholds=LOSS_THRESHOLDS,
                     description="When retention will delete records the group has not read, "
                                 "per topic-partition, at the rates of each snapshot: the log "
                                 "start catching up with the committed offset (a log that "
                                 "deletes), or the committed record reaching retention.ms. "
                                 "No line: no loss forecast (the group keeps up). 0: records "
                                 "are being lost. The data_loss_forecast rule fires below 1 "
                                 "h."), 24, 7),
        (_timeseries("Lag per partition (records)",
                     "SELECT time, series AS metric, lag_records\n"
                     "FROM serve.partition_lag_history\n"
                     "WHERE " + where + " AND " + TOPICS + " AND $__timeFilter(time)\n"
                     "ORDER BY 1",
                     unit=RECORDS, axis_label="records",
                     description="One line per topic-partition (topic-partition)."), 12, 9),
        (_timeseries("Lag per member (records)",
                     "SELECT time, member AS metric, lag_records\n"
                     "FROM serve.member_lag_history\n"
                     "WHERE " + where + " AND $__timeFilter(time)\nORDER BY 1",
                     unit=RECORDS, axis_label="records",
                     description="A member's lag sums its assigned partitions' (client id @ "
                                 "host)."), 12, 9),
        (_timeseries("Time lag: exact and estimated",
                     "SELECT time, time_lag_exact_s AS \"exact (sampled record)\",\n"
                     "       time_lag_estimated_s AS \"estimated (interpolated)\"\n"
                     "FROM serve.group_lag_history\n"
                     "WHERE " + where + " AND $__timeFilter(time)\nORDER BY 1",
                     unit=SECONDS, axis_label="seconds", thresholds=LAG_SECONDS_THRESHOLDS,
                     description="The group's maximum over its partitions. Exact: the age of "
                                 "the record at the committed offset, where the collector "
                                 "sampled it. Estimated: interpolated over the history of "
                                 "(high watermark, time), as kafka-lag-exporter does."), 12, 8),
        (_timeseries("Lag per topic (records)",
                     "SELECT time, topic AS metric, lag_records\n"
                     "FROM serve.topic_lag_history\n"
                     "WHERE " + where + " AND " + TOPICS + " AND $__timeFilter(time)\n"
                     "ORDER BY 1",
                     unit=RECORDS, axis_label="records"), 12, 8),
        (_state_timeline("Status history",
                         "SELECT time, status_level AS status FROM serve.group_status_history\n"
                         "WHERE " + where + " AND $__timeFilter(time)\nORDER BY 1",
                         mappings=STATUS_LEVEL,
                         description="OK / WARN / ERR at each status snapshot."), 12, 4),
        (_state_timeline("State history",
                         "SELECT time, state FROM serve.group_state_history\n"
                         "WHERE " + where + " AND $__timeFilter(time)\nORDER BY 1",
                         mappings=STATE_TEXT,
                         description="The coordinator's group state at each snapshot."), 12, 4),
        (_status_history("Partition status history",
                         "SELECT time, series AS metric,\n"
                         "       CASE status WHEN 'OK' THEN 0 WHEN 'WARN' THEN 1"
                         " WHEN 'REWIND' THEN 2\n"
                         "                   WHEN 'STALL' THEN 3 ELSE 4 END AS status\n"
                         "FROM serve.partition_status_history\n"
                         "WHERE " + where + " AND " + TOPICS + " AND $__timeFilter(time)\n"
                         "ORDER BY 1",
                         mappings=PARTITION_STATUS_LEVEL,
                         description="Each partition's status (OK, WARN, REWIND, STALL, STOP) "
                                     "at each snapshot."), 24, 8),
        (_table("Members and assignment now",
                "SELECT member_id, client_id, host, instance_id, assigned_partitions, assignment,\n"
                "       lag_records, time_lag_exact_s, time_lag_estimated_s, snapshot_time\n"
                "FROM serve.members_now WHERE " + where + "\n"
                "ORDER BY lag_records DESC NULLS LAST, member_id",
                columns=[
                    _column("assigned_partitions", label="partitions",
                            thresholds=((None, "orange"), (1.0, "green"))),
                    _column("lag_records", label="lag (records)", unit=RECORDS,
                            thresholds=LAG_RECORDS_THRESHOLDS),
                    _column("time_lag_exact_s", label="time lag, exact", unit=SECONDS),
                    _column("time_lag_estimated_s", label="time lag, estimated", unit=SECONDS),
                    _column("instance_id", label="static instance id"),
                ]), 24, 7),
        (_table("Rebalance timeline",
                "SELECT time, generation, rebalance_type, cause_text, members, members_joined,\n"
                "       members_left, partitions_moved, source, estimated\n"
                "FROM serve.rebalance_timeline\n"
                "WHERE " + where + " AND $__timeFilter(time)\nORDER BY time DESC",
                description="Each rebalance and its cause (members joined, left, both, or no "
                            "membership change: a subscription or partition-count change, a "
                            "slow poll). Estimated events come from snapshots, not from "
                            "__consumer_offsets.",
                columns=[_column("cause_text", label="cause"),
                         _column("rebalance_type", label="protocol"),
                         _column("partitions_moved", label="partitions moved")]), 12, 8),
        (_timeseries("Rebalances per hour, by cause",
                     "SELECT time, joined_only AS \"members joined\",\n"
                     "       left_only AS \"members left\",\n"
                     "       joined_and_left AS \"joined and left\",\n"
                     "       no_membership_change AS \"no membership change\"\n"
                     "FROM serve.rebalance_hourly\n"
                     "WHERE " + where + " AND $__timeFilter(time)\nORDER BY 1",
                     unit="short", axis_label="rebalances", bars=True, stacked=True), 12, 8),
        *_share_panels(where),
        *_streams_panels(where),
        (_table("What-if: other strategies on this group",
                "SELECT strategy, is_current, current_strategy, members, partitions,\n"
                "       max_minus_min, coefficient_of_variation, idle_members,\n"
                "       most_lagged_share, moved_on_leave, subscriptions_inferred\n"
                "FROM serve.whatif_comparison WHERE " + where + "\n"
                "ORDER BY is_current DESC, max_minus_min, strategy",
                description="What each assignment strategy would do to this group's members "
                            "and partitions now ('current' is the real assignment).",
                columns=[
                    _column("is_current", label="current"),
                    _column("max_minus_min", label="partitions max - min",
                            thresholds=(GREEN_ONLY, (2.0, "orange"))),
                    _column("coefficient_of_variation", label="CV"),
                    _column("idle_members", label="idle members", thresholds=ANY_IS_ORANGE),
                    _column("most_lagged_share", label="lag on most-lagged member",
                            unit="percentunit"),
                    _column("moved_on_leave", label="moved if a member leaves"),
                ]), 14, 7),
        (_table("What-if advice",
                "SELECT recommendation, reason, snapshot_time\n"
                "FROM serve.whatif_advice WHERE " + where + " ORDER BY seq",
                ), 10, 7),
    ]
    return _dashboard(GROUP, "groupscope: Group detail",
                      "One group: lag per partition, member and topic, time lag, status and "
                      "state history, members, rebalances and what-if advice; a share group's "
                      "start offsets and lag, a Streams application's tasks and "
                      "subtopologies.",
                      [cluster_variable(), group_variable(), topic_variable()], panels)


def _share_panels(where: str) -> list[Placed]:
    """A share group's own panels (KIP-932); no rows for other kinds."""
    return [
        (_table("Share group: partitions now",
                "SELECT topic, partition, start_offset, lag_records, high_watermark,\n"
                "       log_start_offset, members, snapshot_time\n"
                "FROM serve.share_partitions_now WHERE " + where + "\n"
                "ORDER BY lag_records DESC NULLS LAST, topic, partition",
                description="Where the share group stands on each partition: the start "
                            "offset (the earliest record still in flight; every record "
                            "below it is acknowledged), the broker's lag (records not yet "
                            "acknowledged, Kafka 4.2+) and the members the partition is "
                            "assigned to (they share it). Empty for other kinds of group.",
                columns=[
                    _column("start_offset", label="start offset"),
                    _column("lag_records", label="lag (records)", unit=RECORDS,
                            thresholds=LAG_RECORDS_THRESHOLDS),
                    _column("high_watermark", label="high watermark"),
                    _column("log_start_offset", label="log start"),
                    _column("members", thresholds=((None, "orange"), (1.0, "green"))),
                    _column("snapshot_time", label="snapshot"),
                ]), 24, 6),
        (_timeseries("Share group: lag per partition (records)",
                     "SELECT time, series AS metric, lag_records\n"
                     "FROM serve.share_partition_history\n"
                     "WHERE " + where + " AND $__timeFilter(time)\nORDER BY 1",
                     unit=RECORDS, axis_label="records",
                     description="Records not yet acknowledged, per topic-partition."), 12, 8),
        (_timeseries("Share group: start offset per partition",
                     "SELECT time, series AS metric, start_offset\n"
                     "FROM serve.share_partition_history\n"
                     "WHERE " + where + " AND $__timeFilter(time)\nORDER BY 1",
                     unit="none", axis_label="offset",
                     description="A start offset that stands still while the lag grows: "
                                 "a record no member acknowledges (or no member)."), 12, 8),
    ]


def _streams_panels(where: str) -> list[Placed]:
    """A streams group's own panels (KIP-1071); no rows for other kinds."""
    return [
        (_table("Streams group: tasks per member now",
                "SELECT member_id, client_id, host, process_id, member_epoch, active_tasks,\n"
                "       standby_tasks, warmup_tasks, active, standby, warmup\n"
                "FROM serve.streams_member_task_history\n"
                "WHERE " + where + "\n"
                "  AND time = (SELECT raw_snapshot_time FROM serve.latest_snapshots\n"
                "              WHERE " + CLUSTER + ")\n"
                "ORDER BY active_tasks DESC, member_id",
                description="Each member of the Kafka Streams application (process: its "
                            "Streams instance) and its current tasks: active (processing), "
                            "standby (a replica of the state) and warm-up (catching the state "
                            "up before it moves here). Tasks are subtopology_partition. Empty "
                            "for other kinds of group.",
                columns=[
                    _column("process_id", label="process"),
                    _column("member_epoch", label="epoch"),
                    _column("active_tasks", label="active",
                            thresholds=((None, "orange"), (1.0, "green"))),
                    _column("standby_tasks", label="standby"),
                    _column("warmup_tasks", label="warm-up"),
                    _column("active", label="active tasks"),
                    _column("standby", label="standby tasks"),
                    _column("warmup", label="warm-up tasks"),
                ]), 24, 6),
        (_table("Streams group: subtopologies now",
                "SELECT subtopology_id, source_topics, repartition_sink_topics,\n"
                "       repartition_source_topics, changelog_topics, active_tasks,\n"
                "       replica_tasks\n"
                "FROM serve.streams_subtopologies_now WHERE " + where + "\n"
                "ORDER BY subtopology_id",
                description="The application's topology as the broker knows it: each "
                            "subtopology's topics by role, and its tasks that have an active "
                            "owner now (and standby or warm-up replicas).",
                columns=[
                    _column("subtopology_id", label="subtopology"),
                    _column("source_topics", label="sources"),
                    _column("repartition_sink_topics", label="repartition sinks"),
                    _column("repartition_source_topics", label="repartition sources"),
                    _column("changelog_topics", label="changelogs"),
                    _column("active_tasks", label="active tasks"),
                    _column("replica_tasks", label="standby + warm-up"),
                ]), 24, 5),
        (_timeseries("Streams group: active tasks per member",
                     "SELECT time, member AS metric, active_tasks\n"
                     "FROM serve.streams_member_task_history\n"
                     "WHERE " + where + " AND $__timeFilter(time)\nORDER BY 1",
                     unit="short", axis_label="tasks", stacked=True,
                     description="Tasks move between instances when one joins or leaves "
                                 "(client id @ host)."), 12, 8),
        (_timeseries("Streams group: epochs",
                     "SELECT time, group_epoch AS \"group epoch\",\n"
                     "       assignment_epoch AS \"assignment epoch\",\n"
                     "       topology_epoch AS \"topology epoch\"\n"
                     "FROM serve.group_epoch_history\n"
                     "WHERE " + where + " AND $__timeFilter(time)\nORDER BY 1",
                     unit="none", axis_label="epoch",
                     description="The group epoch rises with each membership or topology "
                                 "change; the assignment epoch follows once the broker has "
                                 "computed the new target assignment; the topology epoch "
                                 "rises when the application's topology changes."), 12, 8),
    ]


# -- Rebalances ------------------------------------------------------------------------------

def rebalances() -> dict[str, Any]:
    in_range = "WHERE " + CLUSTER + " AND $__timeFilter(time)"
    panels: list[Placed] = [
        (_stat("Rebalances",
               "SELECT count(*) AS rebalances FROM serve.rebalance_timeline " + in_range,
               thresholds=(GREEN_ONLY, (24.0, "orange"), (240.0, "red"))), 6, 4),
        (_stat("Partitions moved",
               "SELECT coalesce(sum(partitions_moved), 0) AS partitions_moved\n"
               "FROM serve.rebalance_timeline " + in_range), 6, 4),
        (_stat("Storm hours",
               "SELECT count(*) AS storm_hours FROM serve.rebalance_storms " + in_range,
               thresholds=ANY_IS_RED,
               description="Hours in which a group rebalanced more than 10 times (the "
                           "rebalance_storm rule's threshold)."), 6, 4),
        (_stat("Eager share",
               "SELECT CASE WHEN sum(eager + cooperative + consumer_protocol) > 0\n"
               "            THEN sum(eager)::double precision\n"
               "                 / sum(eager + cooperative + consumer_protocol)\n"
               "            ELSE 0 END AS eager_share\n"
               "FROM serve.rebalance_hourly " + in_range,
               unit="percentunit", thresholds=(GREEN_ONLY, (0.5, "orange")),
               description="Share of rebalances with an eager protocol (stop-the-world: every "
                           "partition revoked)."), 6, 4),
        (_barchart("Rebalance frequency by group",
                   "SELECT group_id, sum(rebalances) AS rebalances\n"
                   "FROM serve.rebalance_hourly " + in_range + "\n"
                   "GROUP BY group_id ORDER BY rebalances DESC, group_id LIMIT 25",
                   x_field="group_id", horizontal=True,
                   description="The 25 groups that rebalanced most in the time range."), 12, 9),
        (_timeseries("Rebalances per hour, by group",
                     "SELECT time, group_id AS metric, rebalances\n"
                     "FROM serve.rebalance_hourly " + in_range + "\nORDER BY 1",
                     unit="short", axis_label="rebalances / hour", bars=True, stacked=True,
                     thresholds=(GREEN_ONLY, (10.0, "red"))), 12, 9),
        (_piechart("Causes",
                   "SELECT coalesce(sum(joined_only), 0) AS \"members joined\",\n"
                   "       coalesce(sum(left_only), 0) AS \"members left\",\n"
                   "       coalesce(sum(joined_and_left), 0) AS \"joined and left\",\n"
                   "       coalesce(sum(no_membership_change), 0) AS \"no membership change\"\n"
                   "FROM serve.rebalance_hourly " + in_range,
                   description="Why the groups rebalanced: members joining (scale-up, "
                               "restart), leaving (shutdown, crash, poll timeout), both, or "
                               "neither (subscription or partition-count change)."), 8, 8),
        (_piechart("Protocols",
                   "SELECT coalesce(sum(eager), 0) AS eager,\n"
                   "       coalesce(sum(cooperative), 0) AS cooperative,\n"
                   "       coalesce(sum(consumer_protocol), 0) AS \"consumer (KIP-848)\"\n"
                   "FROM serve.rebalance_hourly " + in_range,
                   description="Eager (stop-the-world), cooperative (incremental) and the "
                               "consumer protocol (broker-side, KIP-848)."), 8, 8),
        (_timeseries("Causes per hour",
                     "SELECT $__timeGroupAlias(time,'1h'),\n"
                     "       sum(joined_only) AS \"members joined\",\n"
                     "       sum(left_only) AS \"members left\",\n"
                     "       sum(joined_and_left) AS \"joined and left\",\n"
                     "       sum(no_membership_change) AS \"no membership change\"\n"
                     "FROM serve.rebalance_hourly " + in_range + "\nGROUP BY 1 ORDER BY 1",
                     unit="short", axis_label="rebalances", bars=True, stacked=True), 8, 8),
        (_timeseries("Protocols per hour",
                     "SELECT $__timeGroupAlias(time,'1h'),\n"
                     "       sum(eager) AS eager, sum(cooperative) AS cooperative,\n"
                     "       sum(consumer_protocol) AS \"consumer (KIP-848)\"\n"
                     "FROM serve.rebalance_hourly " + in_range + "\nGROUP BY 1 ORDER BY 1",
                     unit="short", axis_label="rebalances", bars=True, stacked=True), 12, 8),
        (_timeseries("Partitions moved per hour, by group",
                     "SELECT time, group_id AS metric, partitions_moved\n"
                     "FROM serve.rebalance_hourly " + in_range + "\nORDER BY 1",
                     unit="short", axis_label="partitions", bars=True, stacked=True), 12, 8),
        (_table("Storms",
                "SELECT cluster, group_id, time, rebalances, partitions_moved,\n"
                "       with_membership_change, no_membership_change, eager, cooperative,\n"
                "       consumer_protocol\n"
                "FROM serve.rebalance_storms " + in_range + "\n"
                "ORDER BY rebalances DESC, time DESC",
                description="Hours in which a group rebalanced more than 10 times.",
                columns=[
                    *_group_columns(),
                    _column("time", label="hour"),
                    _column("rebalances", thresholds=(GREEN_ONLY, (10.0, "red")),
                            background=True),
                ]), 12, 8),
        (_table("Rebalance events",
                "SELECT cluster, group_id, time, generation, rebalance_type, cause_text,\n"
                "       members, members_joined, members_left, partitions_moved, estimated\n"
                "FROM serve.rebalance_timeline " + in_range + "\n"
                "ORDER BY time DESC LIMIT 500",
                columns=[
                    *_group_columns(),
                    _column("rebalance_type", label="protocol"),
                    _column("cause_text", label="cause"),
                    _column("partitions_moved", label="partitions moved"),
                ]), 12, 8),
        (_timeseries("Time spent rebalancing, per hour",
                     "SELECT $__timeGroupAlias(time,'1h'),\n"
                     "       sum(stable_s) AS stable, sum(rebalancing_s) AS rebalancing,\n"
                     "       sum(empty_s) AS empty, sum(other_s) AS other\n"
                     "FROM serve.rebalance_hourly " + in_range + "\nGROUP BY 1 ORDER BY 1",
                     unit=SECONDS, axis_label="group-seconds", bars=True, stacked=True,
                     description="Summed over the cluster's groups: time in Stable, in a "
                                 "rebalance, Empty, and other states."), 24, 7),
    ]
    return _dashboard(REBALANCES, "groupscope: Rebalances",
                      "How often the cluster's groups rebalance, why, with which protocol, "
                      "how many partitions move, and the storms.",
                      [cluster_variable()], panels, time_from="now-24h")


# -- Assignment strategies -------------------------------------------------------------------

def strategies() -> dict[str, Any]:
    in_range = "WHERE " + CLUSTER + " AND $__timeFilter(time)"
    now = "WHERE " + CLUSTER
    series = "strategy || ' (' || group_type || ')' AS metric"
    panels: list[Placed] = [
        (_stat("Groups with idle members",
               "SELECT count(*) FILTER (WHERE idle_members > 0) AS groups,\n"
               "       coalesce(sum(idle_members), 0) AS idle_members\n"
               "FROM serve.group_skew_latest " + now,
               thresholds=ANY_IS_ORANGE,
               description="Members with no partition, at the newest skew snapshot."), 8, 4),
        (_stat("Groups the advice would change",
               "SELECT count(DISTINCT group_id) AS groups FROM serve.whatif_advice " + now,
               thresholds=ANY_IS_ORANGE), 8, 4),
        (_stat("Most uneven group (partitions max - min)",
               "SELECT coalesce(max(max_minus_min), 0) AS max_minus_min\n"
               "FROM serve.group_skew_latest " + now,
               thresholds=(GREEN_ONLY, (2.0, "orange"), (5.0, "red"))), 8, 4),
        (_table("Skew distribution per strategy, now",
                "SELECT strategy, group_type, count(*) AS groups,\n"
                "       min(max_minus_min) AS min_spread,\n"
                "       avg(max_minus_min)::double precision AS avg_spread,\n"
                "       max(max_minus_min) AS max_spread,\n"
                "       avg(coefficient_of_variation) AS avg_cv,\n"
                "       percentile_cont(0.9) WITHIN GROUP (ORDER BY coefficient_of_variation)\n"
                "         AS p90_cv,\n"
                "       sum(idle_members) AS idle_members,\n"
                "       avg(most_lagged_share) AS avg_most_lagged_share\n"
                "FROM serve.group_skew_latest " + now + "\n"
                "GROUP BY strategy, group_type ORDER BY strategy, group_type",
                description="Per strategy across the cluster's groups: partitions per member "
                            "(max - min), coefficient of variation, idle members, and the "
                            "share of a group's lag on its most-lagged member.",
                columns=[
                    _column("min_spread", label="partitions max-min: min"),
                    _column("avg_spread", label="avg", thresholds=(GREEN_ONLY, (2.0, "orange"))),
                    _column("max_spread", label="max", thresholds=(GREEN_ONLY, (2.0, "orange"))),
                    _column("avg_cv", label="CV avg"),
                    _column("p90_cv", label="CV p90"),
                    _column("idle_members", label="idle members", thresholds=ANY_IS_ORANGE),
                    _column("avg_most_lagged_share", label="lag on most-lagged member",
                            unit="percentunit"),
                ]), 24, 6),
        (_timeseries("Partition spread per strategy (avg max - min)",
                     "SELECT time, " + series + ", avg_max_minus_min\n"
                     "FROM serve.strategy_skew " + in_range + "\nORDER BY 1",
                     unit="short", axis_label="partitions"), 12, 8),
        (_timeseries("Coefficient of variation per strategy",
                     "SELECT time, " + series + ", avg_coefficient_of_variation\n"
                     "FROM serve.strategy_skew " + in_range + "\nORDER BY 1",
                     unit="none", axis_label="CV of partitions per member"), 12, 8),
        (_timeseries("Idle members per strategy (avg per group)",
                     "SELECT time, " + series + ", avg_idle_members\n"
                     "FROM serve.strategy_skew " + in_range + "\nORDER BY 1",
                     unit="short", axis_label="members"), 12, 8),
        (_timeseries("Movement per rebalance, per strategy",
                     "SELECT time, " + series + ", avg_partitions_moved\n"
                     "FROM serve.strategy_skew " + in_range + "\nORDER BY 1",
                     unit="short", axis_label="partitions moved / rebalance",
                     description="Average partitions moved per rebalance: eager strategies "
                                 "revoke everything, sticky ones move what must move."), 12, 8),
        (_table("Idle members by group, now",
                "SELECT cluster, group_id, strategy, members, partitions, idle_members,\n"
                "       max_minus_min, coefficient_of_variation, most_lagged_member,\n"
                "       most_lagged_share\n"
                "FROM serve.group_skew_latest " + now + " AND idle_members > 0\n"
                "ORDER BY idle_members DESC, group_id",
                columns=[
                    *_group_columns(),
                    _column("idle_members", label="idle members", thresholds=ANY_IS_ORANGE,
                            background=True),
                    _column("max_minus_min", label="partitions max - min"),
                    _column("coefficient_of_variation", label="CV"),
                    _column("most_lagged_share", label="lag on most-lagged member",
                            unit="percentunit"),
                ]), 12, 8),
        (_table("What-if advice",
                "SELECT cluster, group_id, recommendation, reason\n"
                "FROM serve.whatif_advice " + now + "\nORDER BY group_id, seq",
                columns=[_column("cluster", hidden=True),
                         _column("group_id", label="group", links=[_group_link()])]), 12, 8),
        (_table("What-if comparison",
                "SELECT cluster, group_id, strategy, is_current, current_strategy, members,\n"
                "       partitions, max_minus_min, coefficient_of_variation, idle_members,\n"
                "       most_lagged_share, moved_on_leave, subscriptions_inferred\n"
                "FROM serve.whatif_comparison " + now + "\n"
                "ORDER BY group_id, is_current DESC, max_minus_min, strategy",
                description="Per group, what each strategy would give on the same members and "
                            "partitions ('current' is the real assignment).",
                columns=[
                    *_group_columns(),
                    _column("is_current", label="current"),
                    _column("max_minus_min", label="partitions max - min",
                            thresholds=(GREEN_ONLY, (2.0, "orange"))),
                    _column("coefficient_of_variation", label="CV"),
                    _column("idle_members", label="idle members", thresholds=ANY_IS_ORANGE),
                    _column("most_lagged_share", label="lag on most-lagged member",
                            unit="percentunit"),
                    _column("moved_on_leave", label="moved if a member leaves"),
                ]), 24, 10),
    ]
    return _dashboard(STRATEGIES, "groupscope: Assignment strategies",
                      "How evenly each assignment strategy spreads partitions and lag, idle "
                      "members, movement per rebalance, and what another strategy would give.",
                      [cluster_variable()], panels, time_from="now-24h")


# -- Coordinators and brokers ----------------------------------------------------------------

def coordinators() -> dict[str, Any]:
    now = "WHERE " + CLUSTER
    in_range = "WHERE " + CLUSTER + " AND $__timeFilter(time)"
    panels: list[Placed] = [
        (_stat("Coordinators",
               "SELECT count(*) AS coordinators FROM serve.coordinator_load " + now), 6, 4),
        (_stat("Most groups on one coordinator",
               "SELECT coalesce(max(groups), 0) AS groups FROM serve.coordinator_load " + now),
         6, 4),
        (_stat("Groups not on their expected coordinator",
               "SELECT coalesce(sum(groups_not_on_expected), 0) AS groups\n"
               "FROM serve.coordinator_load " + now,
               thresholds=ANY_IS_ORANGE,
               description="The coordinator differs from the leader of the group's "
                           "__consumer_offsets partition (a move in progress, or a stale "
                           "metadata view)."), 6, 4),
        (_stat("Coordinator moves",
               "SELECT count(*) AS moves FROM serve.coordinator_moves " + in_range,
               thresholds=ANY_IS_ORANGE), 6, 4),
        (_barchart("Groups per coordinator, now",
                   "SELECT 'broker ' || coordinator AS coordinator, groups, members\n"
                   "FROM serve.coordinator_load " + now + "\nORDER BY groups DESC, coordinator",
                   x_field="coordinator",
                   description="How coordinator load is spread over the brokers."), 12, 9),
        (_timeseries("Groups per coordinator",
                     "SELECT time, 'broker ' || coordinator AS metric, groups\n"
                     "FROM serve.coordinator_load_history " + in_range + "\nORDER BY 1",
                     unit="short", axis_label="groups", stacked=True), 12, 9),
        (_timeseries("Coordinator moves per hour",
                     "SELECT $__timeGroupAlias(time,'1h'), count(*) AS moves\n"
                     "FROM serve.coordinator_moves " + in_range + "\nGROUP BY 1 ORDER BY 1",
                     unit="short", axis_label="moves", bars=True), 12, 8),
        (_table("Coordinator moves",
                "SELECT cluster, group_id, time, from_coordinator, to_coordinator,\n"
                "       expected_coordinator\n"
                "FROM serve.coordinator_moves " + in_range + "\nORDER BY time DESC LIMIT 500",
                description="Groups whose coordinator changed between two snapshots (the "
                            "leadership of its __consumer_offsets partition moved).",
                columns=[
                    *_group_columns(),
                    _column("from_coordinator", label="from broker"),
                    _column("to_coordinator", label="to broker"),
                    _column("expected_coordinator", label="expected broker"),
                ]), 12, 8),
        (_table("Coordinator load, now",
                "SELECT coordinator, groups, members, groups_not_on_expected, snapshot_time\n"
                "FROM serve.coordinator_load " + now + "\nORDER BY groups DESC, coordinator",
                columns=[_column("groups_not_on_expected", label="groups not on expected",
                                 thresholds=ANY_IS_ORANGE)]), 24, 6),
    ]
    return _dashboard(COORDINATORS, "groupscope: Coordinators and brokers",
                      "Which broker coordinates which groups, how the load is spread, and "
                      "when coordinators move.",
                      [cluster_variable()], panels, time_from="now-24h")


def build_all() -> dict[str, dict[str, Any]]:
    """Dashboard uid -> its JSON model (plain, JSON-serialisable)."""
    built = {OVERVIEW: overview(), GROUP: group_detail(), REBALANCES: rebalances(),
             STRATEGIES: strategies(), COORDINATORS: coordinators()}
    if set(built) != set(DASHBOARDS):
        raise RuntimeError("the dashboards built differ from serve.grafana.DASHBOARDS")
    return built


def render(dashboard: dict[str, Any]) -> str:
    """The committed form: sorted keys, indent 2, a trailing newline."""
    return json.dumps(dashboard, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for uid, dashboard in build_all().items():
        path = directory / f"{DASHBOARDS[uid]}.json"
        path.write_text(render(dashboard), encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m groupscope.serve.grafana.dashboards DIR", file=sys.stderr)
        return 2
    for path in write_all(Path(args[0])):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
