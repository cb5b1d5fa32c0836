"""Small PromQL helpers: catalog-checked selectors and recording-rule names.

Rules and dashboards build queries through these so that a metric is always named by its catalog
entry (``sel(catalog.get("rl_entropy"))``), never by a free string.
"""

from __future__ import annotations

import re

from rlpulse import catalog
from rlpulse.catalog import Metric

_MATCHER = re.compile(r'^([a-zA-Z_][a-zA-Z0-9_]*)(=~|!~|!=|=)"((?:[^"\\]|\\.)*)"$')


def sel(metric: Metric, *matchers: str, suffix: str = "", extra: str = "", record: str = "") -> str:
    """A series selector for ``metric`` (``suffix``: ``_bucket``/``_sum``/``_count`` of a
    histogram), with label ``matchers`` like ``'split="eval"'`` checked against the metric's
    labels, and ``extra`` matchers (the config's selector) appended verbatim.

    ``record``: select that recording rule's series of ``metric`` (see :func:`record_name`)
    instead; its matchers are checked against the metric's labels all the same."""
    name = record or metric.name + suffix
    if record and recorded_metric(record) != metric:
        raise ValueError(f"{record} is not a recording of {metric.name}")
    if not record and name not in catalog.series_names(metric):
        raise ValueError(f"{name} is not a series of {metric.name}")
    allowed = {*metric.labels, *catalog.IDENTITY_LABELS, "job", "instance"}
    if suffix == "_bucket":
        allowed.add("le")
    for m in matchers:
        found = _MATCHER.match(m)
        if not found or found.group(1) not in allowed:
            raise ValueError(f"{metric.name}: bad label matcher {m!r} (labels: {sorted(allowed)})")
    parts = [*matchers, *([extra] if extra else [])]
    return f"{name}{{{','.join(parts)}}}" if parts else name


def record_name(level: str, metric: Metric, operation: str) -> str:
    """A recording-rule name ``level:metric:operation``; counters drop ``_total`` (a rate of
    ``rl_samples_total`` is ``run:rl_samples:rate``)."""
    base = metric.name.removesuffix("_total") if metric.type == "counter" else metric.name
    return f"{level}:{base}:{operation}"


def recorded_metric(record: str) -> Metric:
    """The catalog metric a :func:`record_name` ``level:metric:operation`` records."""
    parts = record.split(":")
    if len(parts) != 3:
        raise ValueError(f"{record!r} is not a recording name level:metric:operation")
    base = parts[1]
    found = catalog.BY_NAME.get(base) or catalog.BY_NAME.get(f"{base}_total")
    if found is None:
        raise ValueError(f"{record!r} records no catalog metric")
    return found


def regex_alternatives(values: tuple[str, ...] | list[str]) -> str:
    """``a|b|c`` with regex metacharacters escaped, for an ``=~`` matcher."""
    return "|".join(re.escape(v).replace("\\", "\\\\") for v in values)


def template_matchers(*labels: str) -> str:
    """``job=%q,run_id=%q``: matchers whose values a Go template fills in with
    :func:`template_query` (``%q`` quotes a value as a PromQL string, whatever it holds)."""
    return ",".join(f"{name}=%q" for name in labels)


def template_query(expr: str, *args: str) -> str:
    """The Go template opening ``{{ with printf `expr` args | query }}`` (closed by
    ``{{ end }}``): each ``%q`` in ``expr`` takes one of ``args`` (a pipeline such as
    ``$labels.run_id``, or a quoted constant), quoted and escaped, so a label value holding
    ``"`` or ``} or other{`` stays one value of one matcher. Every query an annotation runs is
    built here: a bare ``"%s"`` would let a run's own labels rewrite the query."""
    if "%s" in expr or "`" in expr or expr.count("%q") != len(args):
        raise ValueError(f"template query {expr!r}: one %q per argument {args}, and no %s")
    return f"{{{{ with printf `{expr}` {' '.join(args)} | query }}}}"
