"""PromQL fragments bound to one Config: the selector, the windows, the per-run aggregations.

Rules (``stack.rules``) and alert definitions (``stack.alerts``) build their expressions with
``Query`` so every series gets the config's extra matchers and every window comes from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlpulse import catalog
from rlpulse.stack.promql import sel

if TYPE_CHECKING:
    from rlpulse.stack.config import Config

RUN_BY = "job, run_id"
NODE_BY = "job, run_id, node"
# Counters every rank holds the same global value of (the step): a run's rate is their max, not
# their sum. Every other throughput counter counts the rank's own work and is summed.
GLOBAL_COUNTERS = (catalog.get("rl_train_steps_total"),)


class Query:
    """PromQL fragments bound to one Config (selector and windows)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.w = cfg.windows

    def s(self, metric: catalog.Metric, *matchers: str, suffix: str = "") -> str:
        return sel(metric, *matchers, suffix=suffix, extra=self.cfg.selectors.metrics)

    def up(self) -> str:
        return f'up{{job="{self.cfg.scrape.job_name}"}}'

    def recent(self, metric: catalog.Metric, *matchers: str, fn: str = "avg") -> str:
        """The series' level (``fn``: avg, max, min or median) over the recent window."""
        inner = f"{self.s(metric, *matchers)}[{self.w.recent}]"
        if fn == "median":
            return f"quantile_over_time(0.5, {inner})"
        return f"{fn}_over_time({inner})"

    def rate(self, metric: catalog.Metric, window: str = "", suffix: str = "") -> str:
        return f"rate({self.s(metric, suffix=suffix)}[{window or self.w.rate}])"

    def run_sum_rate(self, metric: catalog.Metric, window: str = "", offset: str = "") -> str:
        """A run's rate of a counter: summed over ranks, or their max for a global counter."""
        off = f" offset {offset}" if offset else ""
        agg = "max" if metric in GLOBAL_COUNTERS else "sum"
        return f"{agg} by ({RUN_BY}) (rate({self.s(metric)}[{window or self.w.rate}]{off}))"

    def by(self, op: str, labels: str, metric: catalog.Metric) -> str:
        return f"{op} by ({labels}) ({self.s(metric)})"

    def run_quantile(
        self, q: float, metric: catalog.Metric, window: str = "", off: str = ""
    ) -> str:
        offset = f" offset {off}" if off else ""
        bucket = self.s(metric, suffix="_bucket")
        rate = f"rate({bucket}[{window or self.w.rate}]{offset})"
        # a window without observations has no quantile (0/0 is NaN): no sample, not NaN
        return f"(histogram_quantile({q}, sum by ({RUN_BY}, le) ({rate})) >= 0)"
