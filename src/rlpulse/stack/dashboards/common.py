"""Shared pieces of the generated Grafana dashboards: datasource, selectors, queries, panels.

Every dashboard module declares its panels as small functions built from these helpers and hands
its rows to :func:`assemble`, which numbers panels and query refIds and lays them out.
Metric names are looked up in :mod:`rlpulse.catalog` when a query is built, so a typo fails at
generation time rather than in Grafana.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, stat, table, timeseries, trend
from grafana_foundation_sdk.builders import prometheus as promb
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from rlpulse import catalog
from rlpulse.stack import panels, rules
from rlpulse.stack.promql import recorded_metric, sel

DATASOURCE_VARIABLE = "datasource"
PROMETHEUS = dm.DataSourceRef(type_val="prometheus", uid="${" + DATASOURCE_VARIABLE + "}")
RATE = "[$__rate_interval]"
HEATMAP_COLOR_STEPS = 64  # Grafana's default; the SDK's 0 makes its palette draw no cells
NATS = "suffix: nats"
TOKENS = "suffix: tokens"
SCIENTIFIC = "sci"
# Grafana units of the step signals' units (rlpulse.detect.signals.Unit)
SIGNAL_UNITS = {
    "fraction": "percentunit",
    "multiple": "suffix:x",
    "nats": NATS,
    "sigma": "suffix: sigma",
}
ALERTS = "ALERTS"  # the series Prometheus writes for every pending/firing alert

# Grafana units for the catalog's unit strings (``Metric.unit``); "" is a plain number.
_UNITS = {
    "ratio": "percentunit",
    "seconds": "s",
    "bytes": "bytes",
    "watts": "watt",
    "celsius": "celsius",
    "hertz": "hertz",
    "tokens": TOKENS,
    "": "none",
}


def unit_of(name: str) -> str:
    """The Grafana unit for catalog metric ``name``."""
    return _UNITS[catalog.get(name).unit]


# ---- queries ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selector:
    """The label matchers every query of one dashboard carries, one per template variable."""

    variables: tuple[str, ...]

    def __call__(self, name: str, suffix: str = "", /, **matchers: str) -> str:
        """``name+suffix{var=~"$var",…,key="value"}`` for catalog metric ``name``, built and
        checked (series and label names) by the rules' builder, ``rlpulse.stack.promql.sel``.

        ``suffix`` selects a histogram's ``_bucket``/``_sum``/``_count`` series.
        """
        return sel(catalog.get(name), *_matchers(self.variables, matchers), suffix=suffix)

    def rate(self, name: str, suffix: str = "", /, **matchers: str) -> str:
        """Per-second rate of a counter (or histogram series) over ``$__rate_interval``."""
        return f"rate({self(name, suffix, **matchers)}{RATE})"

    def quantile(self, q: float, name: str, by: Sequence[str] = ()) -> str:
        """``histogram_quantile`` of a catalog histogram, buckets summed by ``le`` and ``by``."""
        labels = ", ".join(("le", *by))
        return f"histogram_quantile({q}, sum by ({labels}) ({self.rate(name, '_bucket')}))"


@dataclass(frozen=True)
class Recorded:
    """Selectors of recorded series (rlpulse.stack.rules) filtered by the dashboard variables
    they carry: pre-aggregated per run (``job``, ``run_id``) or per node (also ``node``)."""

    variables: tuple[str, ...]

    def __call__(self, record: str, **matchers: str) -> str:
        """``record{var=~"$var", …, key="value"}`` for a recording rule's name, built and
        checked (label names against the recorded metric's) by ``rlpulse.stack.promql.sel``."""
        if record not in rules.recorded_names():
            raise ValueError(f"{record!r} is not a recording rule of rlpulse.stack.rules")
        parts = _matchers(self.variables, matchers)
        return sel(recorded_metric(record), *parts, record=record)


def _matchers(variables: Sequence[str], matchers: Mapping[str, str]) -> list[str]:
    """``var=~"$var"`` for each dashboard variable, then ``key="value"`` for each matcher."""
    return [f'{v}=~"${v}"' for v in variables] + [f'{k}="{v}"' for k, v in matchers.items()]


@dataclass(frozen=True)
class Target:
    """One Prometheus target of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False
    format: PromQueryFormat = PromQueryFormat.TIME_SERIES
    exemplar: bool = False


NONE_YET = "none"  # the label value of the 0 a counter reads before its first increment


def zero_when_absent(expr: str, by: Sequence[str], alive: str, label: str = "") -> str:
    """``expr`` (aggregated ``by`` those labels), or 0 for each ``by`` group of ``alive`` (a
    series every scraped run has) where ``expr`` has no series yet: a counter before its first
    increment reads 0 for the runs that are up, with ``label`` (the label ``expr`` splits by
    beyond ``by``) set to ``none``, never an entry without labels; a run that is gone leaves
    a gap."""
    group = f"0 * group by ({', '.join(by)}) ({alive})" if by else f"0 * group({alive})"
    zero = f'label_replace({group}, "{label}", "{NONE_YET}", "", "")' if label else group
    return f"{expr} or on({', '.join(by)}) {zero}"


def ref_id(index: int) -> str:
    """The refId of the panel's ``index``-th query: A, B, …, Z, AA, AB, …"""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def _target(query: Target, index: int) -> promb.Dataquery:
    target = (
        promb.Dataquery()
        .ref_id(ref_id(index))
        .datasource(PROMETHEUS)
        .expr(query.expr)
        .legend_format(query.legend or "__auto")
        .format(query.format)
        .exemplar(query.exemplar)
    )
    return target.instant() if query.instant else target.range()


# ---- panels -----------------------------------------------------------------------------------


class _Panel(Protocol):
    def title(self, title: str) -> Any: ...
    def description(self, description: str) -> Any: ...
    def unit(self, unit: str) -> Any: ...
    def datasource(self, datasource: dm.DataSourceRef) -> Any: ...
    def span(self, w: int) -> Any: ...
    def height(self, h: int) -> Any: ...
    def with_target(self, target: promb.Dataquery) -> Any: ...
    def id(self, id_val: int) -> Any: ...
    def build(self) -> dm.Panel: ...


P = TypeVar("P", bound=_Panel)


def _panel(
    panel: P,
    title: str,
    unit: str,
    description: str,
    queries: Sequence[Target],
    span: int,
    height: int,
) -> P:
    panel.title(title).description(description).unit(unit).datasource(PROMETHEUS)
    panel.span(span).height(height)
    for i, query in enumerate(queries):
        panel.with_target(_target(query, i))
    return panel


def graph(
    title: str,
    unit: str,
    description: str,
    queries: Sequence[Target],
    *,
    span: int = 12,
    height: int = 8,
) -> timeseries.Panel:
    """A time series panel with the dashboards' common look (table legend with last and max)."""
    panel = (
        timeseries.Panel()
        .line_width(1)
        .fill_opacity(8)
        .show_points(cm.VisibilityMode.NEVER)
        .span_nulls(False)  # an outage (no samples) is a gap, not a straight line
        .legend(
            cb.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI))
    )
    return _panel(panel, title, unit, description, queries, span, height)


def right_axis(panel: timeseries.Panel, query_index: int, unit: str) -> timeseries.Panel:
    """Put the series of the panel's ``query_index``-th query on a right axis with ``unit``."""
    return panel.override_by_query(
        ref_id(query_index),
        [
            dm.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
            dm.DynamicConfigValue(id_val="unit", value=unit),
        ],
    )


def log_scale(panel: P, *linear_queries: int) -> P:
    """Log-10 y axis (for norms and rates that span decades); the series of the panel's
    ``linear_queries``-th queries (on a right axis, values that can be 0) keep a linear one."""
    log = cb.ScaleDistributionConfig().type(cm.ScaleDistribution.LOG).log(10)
    panel.scale_distribution(log)  # type: ignore[attr-defined]
    for index in linear_queries:
        panel.override_by_query(  # type: ignore[attr-defined]
            ref_id(index),
            [dm.DynamicConfigValue(id_val="custom.scaleDistribution", value={"type": "linear"})],
        )
    return panel


def symlog_scale(panel: P, linear_threshold: float = 1.0) -> P:
    """Symmetric log-10 y axis, linear within ±``linear_threshold``: statistics that sit near
    0 and can jump by orders of magnitude (a z-score of 8 next to one of 3,600), either sign."""
    config = cb.ScaleDistributionConfig().type(cm.ScaleDistribution.SYMLOG).log(10)
    return panel.scale_distribution(config.linear_threshold(linear_threshold))  # type: ignore[attr-defined]


def thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    """Absolute thresholds from ``(value, color)`` steps; the first step's value is None."""
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=value, color=color) for value, color in steps])
    )


SEVERITY_COLORS = {"warning": "orange", "critical": "red"}


def alert_levels(levels: Sequence[tuple[str, float]]) -> db.ThresholdsConfig:
    """A threshold at each of an alert's ``(severity, level)`` pairs, in the severity's colour."""
    ordered = sorted(levels, key=lambda sev_level: sev_level[1])
    return thresholds((None, "transparent"), *((lvl, SEVERITY_COLORS[sev]) for sev, lvl in ordered))


def threshold_lines(panel: timeseries.Panel, config: db.ThresholdsConfig) -> timeseries.Panel:
    """Draw ``config``'s thresholds as dashed lines."""
    return panel.thresholds(config).thresholds_style(
        cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
    )


def zero_line(panel: timeseries.Panel, color: str = "red") -> timeseries.Panel:
    """A threshold line at 0 (e.g. explained variance below 0 is worse than a mean)."""
    return threshold_lines(panel, thresholds((None, "transparent"), (0.0, color)))


def stacked(panel: timeseries.Panel) -> timeseries.Panel:
    """Stack series on each other (parts of a whole that keep their own size)."""
    return panel.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL)).fill_opacity(40)


def stacked_percent(panel: timeseries.Panel) -> timeseries.Panel:
    """Stack series to 100 % (shares of a whole)."""
    return panel.stacking(cb.StackingConfig().mode(cm.StackingMode.PERCENT)).fill_opacity(40)


def single_stat(
    title: str,
    unit: str,
    description: str,
    queries: Sequence[Target],
    *,
    span: int = 6,
    height: int = 4,
) -> stat.Panel:
    """A stat panel showing the last value with a sparkline."""
    panel = (
        stat.Panel()
        .graph_mode(cm.BigValueGraphMode.AREA)
        .color_mode(cm.BigValueColorMode.VALUE)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]))
    )
    return _panel(panel, title, unit, description, queries, span, height)


def grid(
    title: str,
    unit: str,
    description: str,
    queries: Sequence[Target],
    transformations: Sequence[dm.DataTransformerConfig],
    *,
    span: int = 24,
    height: int = 8,
) -> table.Panel:
    """A table panel (instant queries in table format, reshaped by ``transformations``)."""
    panel = table.Panel().filterable(True)
    for transformation in transformations:
        panel.with_transformation(transformation)
    return _panel(panel, title, unit, description, queries, span, height)


STEP_FIELD = "step"
VALUE_FIELD = "value"
SERIES_LABEL = "series"  # the label naming each line of a by-step panel
# Prometheus answers at most 11,000 points per series; Grafana widens the step to stay under
MAX_POINTS = 11_000


def by_step(
    title: str,
    unit: str,
    description: str,
    step: str,
    values: Sequence[str],
    *,
    interval: str,
    span: int = 12,
    height: int = 8,
) -> trend.Panel:
    """A trend panel with the training step on the x axis, one line per run and series.

    ``step`` is the run's step selector; each of ``values`` is ``by (run_id, series)`` (the
    ``series`` label names the line). Both queries are evaluated at the same instants, once per
    ``interval`` (the scrape interval: one point per scrape, the densest Prometheus holds), and
    keep only the instants where the run's step advanced since the previous one, so a run that
    logs slower than it is scraped has one point per logged step and an idle run adds none.
    The step query carries the value query's labels, so the two merge row by row on time, run
    and series, and the rows split into one line per run and series: runs that did not run at
    the same time overlay."""
    run_step = f"max by (run_id) ({step})"
    before = f"max by (run_id) ({step} offset $__interval)"
    advanced = f"{run_step} unless on(run_id) ({run_step} <= {before})"
    value = f"max by (run_id, {SERIES_LABEL}) ({' or '.join(values)}) and on(run_id) ({advanced})"
    labels = f"run_id, {SERIES_LABEL}"
    step_of_value = f"{run_step} * on(run_id) group_right() group by ({labels}) ({value})"
    queries = [Target(expr, format=PromQueryFormat.TABLE) for expr in (step_of_value, value)]
    panel = (
        trend.Panel()
        .x_field(STEP_FIELD)
        .line_width(1)
        .show_points(cm.VisibilityMode.AUTO)
        .span_nulls(False)
        .interval(interval)
        .max_data_points(MAX_POINTS)
        .legend(
            cb.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.LIST)
            .placement(cm.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI))
    )
    panel.with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
    panel.with_transformation(
        dm.DataTransformerConfig(
            id_val="organize",
            options={"renameByName": {"Value #A": STEP_FIELD, "Value #B": VALUE_FIELD}},
        )
    )
    panel.with_transformation(
        dm.DataTransformerConfig(
            id_val="partitionByValues",
            options={
                "fields": ["run_id", SERIES_LABEL],
                "keepFields": False,
                "naming": {"asLabels": True},
            },
        )
    )
    panel.override_by_regexp(
        f"^{VALUE_FIELD}",
        [
            dm.DynamicConfigValue(
                id_val="displayName",
                value="${__field.labels.run_id} · ${__field.labels." + SERIES_LABEL + "}",
            )
        ],
    )
    return _panel(panel, title, unit, description, queries, span, height)


def latency_heatmap(
    title: str,
    unit: str,
    description: str,
    expr: str,
    *,
    span: int = 12,
    height: int = 8,
) -> heatmap.Panel:
    """A heatmap of the bucket rates ``expr`` returns (``format: heatmap``), exemplars marked."""
    query = Target(expr, "{{le}}", format=PromQueryFormat.HEATMAP, exemplar=True)
    panel = (
        heatmap.Panel()
        .calculate(False)
        .cell_gap(1)
        .color(
            heatmap.HeatmapColorOptions()
            .mode(hm.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .scale(hm.HeatmapColorScale.EXPONENTIAL)
            .exponent(0.5)
            .steps(HEATMAP_COLOR_STEPS)
        )
        .y_axis(heatmap.YAxisConfig().unit(unit))
        .rows_frame(heatmap.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.LE))
        .exemplars_color("rgba(255,0,255,0.7)")
    )
    return _panel(panel, title, unit, description, [query], span, height)


# ---- variables and annotations ----------------------------------------------------------------


def datasource_variable() -> db.DatasourceVariable:
    """The Prometheus datasource picker every panel refers to (no hard-coded uid)."""
    return db.DatasourceVariable(DATASOURCE_VARIABLE).label("Data source").type("prometheus")


def label_variable(
    name: str, label: str, of: str, depends_on: Selector, *, multi: bool = True
) -> db.QueryVariable:
    """A variable listing the values of label ``name`` on catalog series ``of``.

    ``depends_on`` holds the variables chosen before it, so each list narrows the next.
    """
    variable = (
        db.QueryVariable(name)
        .label(label)
        .datasource(PROMETHEUS)
        .query(f"label_values({depends_on(of)}, {name})")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(multi)
    )
    return variable.all_value(".*") if multi else variable


RUN_ID_REGEX = '/run_id="([^"]+)"/'  # query_result's text: {run_id="…"} VALUE TIMESTAMP
FIRST = 1e12  # added to a firing run's start time: it sorts before every run that is not


def newest_run_variable(depends_on: Selector) -> db.QueryVariable:
    """The single-valued Run variable of a one-run dashboard. Its options are the runs seen in
    the time range, those with a firing alert first, then the newest start first (options
    keep the query's order), so the dashboard opens on the run that is paging, else the
    newest one, not the alphabetically first."""
    start = (
        "max by (run_id) (last_over_time("
        f"{depends_on('rl_exporter_start_timestamp_seconds')}[$__range]))"
    )
    seen = f"0 * max by (run_id) (last_over_time({depends_on('rl_run_info')}[$__range]))"
    firing = f"group by (run_id) ({firing_alerts(depends_on)})"
    first = f"{start} + on(run_id) group_left() (0 * {firing} + {FIRST:g})"
    order = f"sort_desc({first} or {start} or {seen})"
    return (
        db.QueryVariable("run_id")
        .label("Run")
        .datasource(PROMETHEUS)
        .query(f"query_result({order})")
        .regex(RUN_ID_REGEX)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.DISABLED)
        .multi(False)
        .include_all(False)
    )


def firing_alerts(selector: Selector) -> str:
    """The ``ALERTS`` series of the alerts firing for the dashboard's selection."""
    matchers = _matchers(selector.variables, {"alertstate": "firing"})
    return ALERTS + "{" + ",".join(matchers) + "}"


def alerts_annotation(selector: Selector) -> db.AnnotationQuery:
    """Firing alerts of the selected runs as annotations."""
    return (
        db.AnnotationQuery()
        .name("Firing alerts")
        .datasource(PROMETHEUS)
        .expr(firing_alerts(selector))
        .enable(True)
        .icon_color("red")
    )


# Prometheus annotation options the SDK's AnnotationQuery has no setters for.
ALERT_ANNOTATION_OPTIONS = {
    "step": "60s",
    "titleFormat": "{{alertname}}",
    "textFormat": "{{severity}} · run {{run_id}}",
    "tagKeys": "severity,run_id",
    "useValueForTime": False,
}


# ---- layout -----------------------------------------------------------------------------------


@dataclass
class Row:
    """A dashboard row and the panels laid out under it, left to right. A ``collapsed`` row
    (panels some kinds of run cannot fill) opens on a click."""

    title: str
    panels: Sequence[_Panel] = field(default_factory=list)
    collapsed: bool = False


GRAFANA_VERSION = "11.6.0"
DATASOURCE_INPUT = "DS_PROMETHEUS"


def _flow(panels: list[dict[str, Any]], top: int) -> None:
    """Lay out the panels of a collapsed row left to right from grid line ``top``."""
    x, y, height = 0, top, 0
    for panel in panels:
        pos = panel["gridPos"]
        if x + pos["w"] > 24:
            x, y, height = 0, y + height, 0
        pos["x"], pos["y"] = x, y
        x, height = x + pos["w"], max(height, pos["h"])


def _import_metadata(model: dict[str, Any]) -> None:
    """``__inputs``/``__requires`` so a grafana.com-style import asks for the datasource."""
    model["__inputs"] = [
        {
            "name": DATASOURCE_INPUT,
            "label": "Prometheus",
            "description": "The Prometheus that scrapes the trainers and evaluates rlpulse rules",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    kinds = sorted({p["type"] for p in panels_of(model)} - {"row"})
    model["__requires"] = [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        *({"type": "panel", "id": kind, "name": kind, "version": ""} for kind in kinds),
    ]
    for variable in model["templating"]["list"]:
        if variable["name"] == DATASOURCE_VARIABLE:
            ref = "${" + DATASOURCE_INPUT + "}"
            variable["current"] = {"text": ref, "value": ref}


def panels_of(model: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel of a dashboard model, including those nested in collapsed rows."""
    return [p for top in model.get("panels", []) for p in (top, *top.get("panels", []))]


def assemble(dashboard: db.Dashboard, rows: Sequence[Row]) -> dict[str, Any]:
    """Number rows and panels 1, 2, … in order, lay them out, and return the dashboard JSON."""
    next_id = 1
    for row in rows:
        builder = db.Row(row.title).id(next_id)
        next_id += 1
        numbered = [panel.id(next_id + i) for i, panel in enumerate(row.panels)]
        next_id += len(numbered)
        for panel in numbered if row.collapsed else ():
            builder.with_panel(panel)
        dashboard.with_row(builder)
        for panel in () if row.collapsed else numbered:
            dashboard.with_panel(panel)
    model: dict[str, Any] = json.loads(JSONEncoder().encode(dashboard.build()))
    for top in model["panels"]:
        if top.get("collapsed"):
            _flow(top["panels"], top["gridPos"]["y"] + 1)
    for annotation in model.get("annotations", {}).get("list", []):
        if annotation.get("expr", "").startswith(ALERTS):
            annotation.update(ALERT_ANNOTATION_OPTIONS)
    _import_metadata(model)
    return model


def dashboard_links() -> db.DashboardLink:
    """Links to the other rlpulse dashboards, keeping the time range and the run."""
    return (
        db.DashboardLink("rlpulse")
        .type(dm.DashboardLinkType.DASHBOARDS)
        .tags(["rlpulse"])
        .as_dropdown(False)
        .include_vars(True)
        .keep_time(True)
    )


ROLLOUTS_VARIABLE = "rollouts"


def rollouts_variable(default: str) -> db.TextBoxVariable:
    """The rollout viewer's base URL (``rlpulse rollouts serve``, started by ``rlpulse stack
    up``; ``links.rollouts_url``), which the rollout links of the panels open."""
    return (
        db.TextBoxVariable(ROLLOUTS_VARIABLE)
        .label("Rollout viewer")
        .description("Base URL of the rollout viewer (docs/rollouts.md)")
        .default_value(default)
    )


STEP_RANGE = ("step_min", "step_max")
_FIRST_NUMBER = r"/\} (-?[0-9]+)/"  # query_result's text: {labels} VALUE TIMESTAMP


def step_range_variables(step: str) -> list[db.QueryVariable]:
    """Hidden variables ``step_min``/``step_max``: the lowest and highest value of the step series
    ``step`` in the visible time range, recomputed when it changes; the rollout links carry
    them."""
    return [
        db.QueryVariable(name)
        .label(name)
        .datasource(PROMETHEUS)
        .query(f"query_result({fn}({fn}_over_time({step}[$__range])))")
        .regex(_FIRST_NUMBER)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .hide(dm.VariableHide.HIDE_VARIABLE)
        for name, fn in zip(STEP_RANGE, ("min", "max"), strict=True)
    ]


SERIES_RUN = "${__field.labels.run_id}"  # the clicked series' run
CHOSEN_RUN = "${run_id}"  # the dashboard's run, for panels that aggregate over runs
ORDER_TITLES = {"worst": "Lowest-reward", "best": "Highest-reward", "longest": "Longest"}


def rollout_links(panel: P, orders: Sequence[str] = ("worst",), run: str = SERIES_RUN) -> P:
    """Data links from a run's series to its rollouts in the viewer, in each of ``orders``: up
    to the clicked point of the visible time range and in the visible step range, then the
    whole run (``rlpulse rollouts show`` with the same filters prints them and the link)."""
    base = "${" + ROLLOUTS_VARIABLE + "}/view?run=" + run.replace("}", ":percentencode}")
    n = panels.WORST_ROLLOUTS
    low, high = ("${" + name + "}" for name in STEP_RANGE)
    links = []
    for order in orders:
        what = f"{ORDER_TITLES[order]} rollouts of {run}"
        flag = f"--{order} {n}" if order in ("worst", "best") else f"--limit {n}"
        cli = f"rlpulse rollouts show --run {run} {flag}"
        picked = f"order={order}&limit={n}"
        links += [
            (f"{what} up to this point", f"since=${{__from}}&until=${{__value.time}}&{picked}"),
            (
                f"{what} in the steps shown, {low} to {high} "
                f"({cli} --step-min {low} --step-max {high})",
                f"step_min={low}&step_max={high}&{picked}",
            ),
        ]
    whole = f"rlpulse rollouts list --run {run}"
    links.append((f"Rollouts of {run}, newest steps first ({whole})", "order=recent"))
    built = [
        db.DashboardLink(title).url(f"{base}&{query}").target_blank(True) for title, query in links
    ]
    return panel.data_links(built)  # type: ignore[attr-defined]


def phase_wall_share(sel: Selector, alive: str) -> list[Target]:
    """Each phase's share of wall time (seconds spent in it per second, averaged over ranks)
    and the untimed rest, while ``alive`` (a series of the run) exists: a loop that times one
    phase and sleeps shows the sleep as untimed, not the phase as 100 %. Phases that overlap
    (one timed inside another, or on several threads) add up to more than the wall time; then
    each is its share of the timed total, so the shares never exceed 100 % and the rest is 0."""
    timed = f"avg by (phase) ({sel.rate('rl_phase_duration_seconds', '_sum')})"
    share = f"{timed} / on() group_left() clamp_min(sum({timed}), 1)"
    rest = f"clamp_min(1 - (sum({timed}) or on() vector(0)), 0) and on() count({alive})"
    return [Target(share, "{{phase}}"), Target(rest, "untimed")]


def new_dashboard(
    uid: str,
    title: str,
    description: str,
    tags: Sequence[str],
    alerts: Selector,
    variables: Sequence[cogbuilder.Builder[dm.VariableModel]],
) -> db.Dashboard:
    """A dashboard with the defaults all rlpulse dashboards share: a data source and a job to
    pick, then ``variables``; the firing alerts of the series ``alerts`` selects as annotations."""
    dashboard = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["rlpulse", *tags])
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .time("now-3h", "now")
        .refresh("30s")
        .timezone("browser")
        .link(dashboard_links())
        .with_variable(datasource_variable())
        .with_variable(label_variable("job", "Job", "rl_run_info", Selector(())))
        .annotation(alerts_annotation(alerts))
    )
    for variable in variables:
        dashboard.with_variable(variable)
    return dashboard
