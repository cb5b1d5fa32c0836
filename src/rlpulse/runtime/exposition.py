"""Fast text exposition of an exporter: Prometheus text 0.0.4 and OpenMetrics 1.0.0.

A series' sample prefix (``name{run_id="…",rank="…",…} ``) is built once, the first time a
scrape sees the series; later scrapes only format numbers and join strings. The work runs in
slices, and ``pause`` (a ``Pacer``) between slices hands the GIL back to the training thread, so a
scrape of many series never stalls a step for longer than one slice.
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from prometheus_client.utils import floatToGoString

from rlpulse import catalog
from rlpulse.catalog import IDENTITY_LABELS, Metric
from rlpulse.runtime.store import Exemplar, Histogram, Series

if TYPE_CHECKING:
    from rlpulse.runtime.exporter import Exporter

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

SLICE = 512  # scalar series formatted between two calls of ``pause``
_SPECIAL = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}
_add = operator.add

Pause = Callable[[], None]


def format_value(value: float) -> str:
    """A sample value as both formats spell it: ``NaN``, ``+Inf``, ``-Inf``, else Python's repr."""
    try:
        text = repr(float(value))
    except OverflowError:  # an int beyond float range
        return "+Inf" if value > 0 else "-Inf"
    return _SPECIAL.get(text, text)


def format_values(values: Iterable[float]) -> list[str]:
    """``format_value`` over many values, in C loops unless a special value shows up."""
    values = list(values)
    try:
        out = list(map(repr, map(float, values)))
    except OverflowError:
        return [format_value(v) for v in values]
    if not _SPECIAL.keys().isdisjoint(out):
        out = [_SPECIAL.get(s, s) for s in out]
    return out


def format_le(bound: float) -> str:
    """A bucket bound as an ``le`` label value (Go float formatting, as client libraries do)."""
    return str(floatToGoString(bound))


def escape_label(value: str) -> str:
    """A label value escaped for both formats."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str, openmetrics: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if openmetrics else text


def labelset(names: Sequence[str], values: Sequence[str]) -> str:
    """``{a="x",b="y"}`` (or ``""`` without labels)."""
    if not names:
        return ""
    pairs = ",".join(f'{n}="{escape_label(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


def header(metric: Metric, openmetrics: bool) -> list[str]:
    """The HELP/TYPE (and OpenMetrics UNIT) lines of a family."""
    if openmetrics:
        name, kind = metric.family, metric.type
    else:  # 0.0.4 names the family by its sample name and has no info type
        name, kind = metric.name, "gauge" if metric.type == "info" else metric.type
    lines = [f"# HELP {name} {_escape_help(metric.help, openmetrics)}", f"# TYPE {name} {kind}"]
    # promtool and Prometheus reject a UNIT that is not the family name's suffix
    if openmetrics and metric.unit and name.endswith(f"_{metric.unit}"):
        lines.append(f"# UNIT {name} {metric.unit}")
    return lines


def _exemplar(e: Exemplar) -> str:
    return (
        f' # {{rollout_id="{escape_label(e.rollout_id)}"}} {format_value(e.value)} {e.timestamp!r}'
    )


class _HistogramLines:
    """A bound histogram series with its bucket/sum/count prefixes."""

    __slots__ = ("buckets", "count", "hist", "sum")

    def __init__(self, metric: Metric, labels: str, hist: Histogram) -> None:
        self.hist = hist
        sep = "," if labels else ""
        self.buckets = [
            f'{metric.name}_bucket{{{labels}{sep}le="{le}"}} '
            for le in [*(format_le(b) for b in metric.buckets), "+Inf"]
        ]
        own = "{" + labels + "}" if labels else ""
        self.sum = f"{metric.name}_sum{own} "
        self.count = f"{metric.name}_count{own} "

    def lines(self, openmetrics: bool) -> list[str]:
        cumulative, total, exemplars = self.hist.snapshot()
        out = list(map(_add, self.buckets, map(str, cumulative)))
        if openmetrics:
            for i, e in enumerate(exemplars):
                if e is not None:
                    out[i] += _exemplar(e)
        out.append(self.sum + format_value(total))
        out.append(self.count + str(cumulative[-1]))
        return out


class _Family:
    """The store's series of one metric, in the order they were bound."""

    __slots__ = ("hists", "metric", "prefixes", "slots")

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.prefixes: list[str] = []  # scalar series: 'name{labels} '
        self.slots: list[int] = []
        self.hists: list[_HistogramLines] = []


class Renderer:
    """Renders one exporter's store, self-metrics and scrape-time readings as exposition text."""

    def __init__(self, exp: Exporter) -> None:
        self._exp = exp
        self._lock = threading.Lock()
        self._ident: tuple[str, ...] | None = None
        self._seen = 0  # store.series[:_seen] have prefixes
        self._families: dict[str, _Family] = {}
        self._headers: dict[tuple[str, bool], list[str]] = {}

    def render(self, openmetrics: bool = False, pause: Pause | None = None) -> bytes:
        """One scrape: apply pending ``log()`` snapshots, then the exposition, UTF-8 encoded."""
        exp = self._exp
        with self._lock:
            exp.flush(pause)
            extra: dict[str, tuple[Metric, list[str]]] = {}
            ident = tuple(exp.identity)
            for metric, labels, value in exp.scrape_samples():
                entry = extra.setdefault(metric.name, (metric, []))
                entry[1].append(
                    metric.name
                    + labelset((*IDENTITY_LABELS, *metric.labels), (*ident, *labels))
                    + " "
                    + ("1" if metric.type == "info" and openmetrics else format_value(value))
                )
            self._update(ident, pause)
            chunks: list[str] = []
            run_info = catalog.get("rl_run_info").name
            if run_info in extra:
                self._emit(chunks, extra.pop(run_info), openmetrics)
            for name, fam in self._families.items():
                self._family(chunks, fam, extra.pop(name, None), openmetrics, pause)
            for entry in extra.values():
                self._emit(chunks, entry, openmetrics)
            if openmetrics:
                chunks.append("# EOF")
        chunks.append("")
        return "\n".join(chunks).encode("utf-8", "replace")

    def _head(self, metric: Metric, openmetrics: bool) -> list[str]:
        key = (metric.name, openmetrics)
        lines = self._headers.get(key)
        if lines is None:
            lines = self._headers[key] = header(metric, openmetrics)
        return lines

    def _emit(self, chunks: list[str], entry: tuple[Metric, list[str]], openmetrics: bool) -> None:
        metric, lines = entry
        chunks.extend(self._head(metric, openmetrics))
        chunks.append("\n".join(lines))

    def _update(self, ident: tuple[str, ...], pause: Pause | None) -> None:
        """Build prefixes for series bound since the last scrape (all of them if identity moved)."""
        if ident != self._ident:
            self._ident, self._seen, self._families = ident, 0, {}
        series = self._exp.store.series
        new: list[Series] = series[self._seen : len(series)]
        self._seen += len(new)
        for s in new:
            metric = s.metric
            fam = self._families.get(metric.name)
            if fam is None:
                fam = self._families[metric.name] = _Family(metric)
            labels = labelset((*IDENTITY_LABELS, *metric.labels), (*ident, *s.labels))
            if s.hist is not None:
                fam.hists.append(_HistogramLines(metric, labels[1:-1], s.hist))
            else:
                fam.prefixes.append(f"{metric.name}{labels} ")
                fam.slots.append(s.slot)
            if pause is not None:
                pause()

    def _family(
        self,
        chunks: list[str],
        fam: _Family,
        extra: tuple[Metric, list[str]] | None,
        openmetrics: bool,
        pause: Pause | None,
    ) -> None:
        chunks.extend(self._head(fam.metric, openmetrics))
        values = self._exp.store.values
        get = values.__getitem__
        prefixes, slots = fam.prefixes, fam.slots
        for start in range(0, len(slots), SLICE):
            part = slots[start : start + SLICE]
            text = format_values(map(get, part))
            chunks.append("\n".join(map(_add, prefixes[start : start + SLICE], text)))
            if pause is not None:
                pause()
        for h in fam.hists:
            chunks.append("\n".join(h.lines(openmetrics)))
            if pause is not None:
                pause()
        if extra is not None:
            chunks.append("\n".join(extra[1]))


class Pacer:
    """Between slices of scrape work: after ``budget`` seconds of it, sleep ``rest`` seconds.

    A training thread that wants the GIL while the scrape thread holds it otherwise waits for
    the interpreter's switch interval (5 ms); sleeping hands the GIL over at once.
    """

    def __init__(self, budget: float = 0.0003, rest: float = 0.0001) -> None:
        self.budget = budget
        self.rest = rest
        self._since = time.perf_counter()

    def __call__(self) -> None:
        if time.perf_counter() - self._since >= self.budget:
            time.sleep(self.rest)
            self._since = time.perf_counter()
