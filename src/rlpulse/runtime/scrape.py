"""The scrape view: what a scrape adds to the store's series (run info, self-metrics, GPU and
host readings, detector signals, rollout store counters), and the exporter as prometheus_client
families for ``exp.registry`` (the HTTP endpoint renders the same with ``exposition.Renderer``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import (
    Metric as Family,
)
from prometheus_client.samples import Exemplar as PromExemplar

from rlpulse import catalog
from rlpulse.catalog import IDENTITY_LABELS, Metric
from rlpulse.runtime import http
from rlpulse.runtime.exposition import format_le

if TYPE_CHECKING:
    from rlpulse.runtime.exporter import Exporter

SCRAPER_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"


def _from_scraper(request: http.Request) -> bool:
    """Whether a request comes from a scraper: Prometheus and the agents built on its scrape
    code send ``X-Prometheus-Scrape-Timeout-Seconds``."""
    headers = request.headers
    return SCRAPER_HEADER in headers or headers.get("User-Agent", "").startswith("Prometheus/")


def noting_scrapers(exp: Exporter, handler: http.Handler) -> http.Handler:
    """``handler``, noting when a scraper (not a person with curl) fetched it."""

    def serve(request: http.Request) -> http.Response:
        if not exp.scraper_seen and _from_scraper(request):
            exp.scraper_seen = True
        return handler(request)

    return serve


Sample = tuple[Metric, tuple[str, ...], float]  # (metric, its own label values, value)


def samples(exp: Exporter) -> Iterator[Sample]:
    """What a scrape adds to the store: (metric, its own label values, value).

    Run info comes first, then the self-metrics and the GPU/host readings (taken now).
    """
    yield exp.run_info.metric, exp.run_info.values, 1.0
    for reason, n in sorted(exp.dropped.items()):
        yield catalog.get("rlpulse_dropped_values_total"), (reason,), n
    for label, n in sorted(exp.store.overflowed.items()):
        yield catalog.get("rlpulse_label_overflow_total"), (label,), n
    for reader in exp.readings():
        reading = reader.get()
        st = reader.state
        yield catalog.get("rlpulse_collector_enabled"), (st.name,), float(st.enabled)
        if not st.enabled:
            continue
        yield catalog.get("rlpulse_collector_up"), (st.name,), float(st.up)
        yield catalog.get("rlpulse_collector_duration_seconds"), (st.name,), st.duration
        yield catalog.get("rlpulse_collector_errors_total"), (st.name,), st.errors
        for name, labels, value in reading:
            metric = catalog.get(name)
            yield metric, tuple(labels[n] for n in metric.labels), value
    yield from exp.detector.samples()
    yield from exp.drift.samples()
    yield catalog.get("rl_last_progress_timestamp_seconds"), (), exp.last_progress()
    yield from exp.onsets.samples(exp.detector, exp.levels, exp.checkpoints)
    for source in list(exp.sample_sources):
        yield from source()
    if exp._recorder is not None:
        for name, labels, value in exp._recorder.metric_samples():
            metric = catalog.get(name)
            yield metric, tuple(labels[n] for n in metric.labels), value


def _family(metric: Metric, labelnames: list[str]) -> Any:
    doc = metric.help
    if metric.type == "gauge":
        return GaugeMetricFamily(metric.name, doc, labels=labelnames)
    if metric.type == "counter":
        return CounterMetricFamily(metric.family, doc, labels=labelnames)
    if metric.type == "histogram":
        return HistogramMetricFamily(metric.name, doc, labels=labelnames)
    return InfoMetricFamily(metric.family, doc, labels=labelnames)


class Collector:
    """The exporter as prometheus_client families, for ``exp.registry`` (push gateways, tests).

    The HTTP endpoint renders the same content with ``rlpulse.runtime.exposition.Renderer``.
    """

    def __init__(self, exp: Exporter) -> None:
        self._exp = exp

    def collect(self) -> Iterator[Family]:
        exp = self._exp
        exp.flush()
        ident = exp.identity
        names = list(IDENTITY_LABELS)
        families: dict[str, Any] = {}

        def family(metric: Metric) -> Any:
            fam = families.get(metric.name)
            if fam is None:
                fam = families[metric.name] = _family(metric, names + list(metric.labels))
            return fam

        extra = list(exp.scrape_samples())  # run info first, then self-metrics and readings
        info, info_labels, _ = extra.pop(0)
        family(info).add_metric(ident, dict(zip(info.labels, info_labels, strict=True)))
        values = exp.store.values
        for series in list(exp.store.series):
            metric = series.metric
            labels = ident + list(series.labels)
            if series.hist is not None:
                cumulative, total, exemplars = series.hist.snapshot()
                bounds = [*(format_le(b) for b in metric.buckets), "+Inf"]
                buckets = [
                    (le, c, PromExemplar({"rollout_id": e.rollout_id}, e.value, e.timestamp))
                    if e is not None
                    else (le, c)
                    for le, c, e in zip(bounds, cumulative, exemplars, strict=True)
                ]
                family(metric).add_metric(labels, buckets, total)
                continue
            family(metric).add_metric(labels, values[series.slot])
        for metric, own, value in extra:
            family(metric).add_metric(ident + list(own), value)
        yield from families.values()
