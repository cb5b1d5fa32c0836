"""From promtool's firing alerts to what a report says: which alert, from which step, how long."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rlpulse import catalog
from rlpulse.offline.replay.promtool import Firing
from rlpulse.offline.replay.timeline import Timeline

ONSET = catalog.get("rl_failure_onset_step").name

# labels every alert of a replayed run carries (team and cluster: its owner, from the config);
# the rest (network, bound, metric …) is shown
COMMON_LABELS = frozenset(
    {"alertname", "severity", "layer", "team", "cluster", "run_id", "rank", "local_rank"}
    | {"node", "job", "instance"}
)
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Interval:
    """One uninterrupted firing episode, in run seconds and steps (end: last firing eval)."""

    start: float
    end: float
    start_step: int | None
    end_step: int | None


@dataclass
class AlertOnset:
    """An alert (name + severity + distinguishing labels) that fired during the run."""

    alert: str
    severity: str
    labels: dict[str, str]
    value: float | None  # the alert expression's value at onset
    intervals: list[Interval] = field(default_factory=list)
    # the step the run named as the failure's onset when the alert first fired (the page's
    # "since step": where the signal crossed the alert's first level); None for an alert on no
    # step signal. Before ``onset_step`` by the rows logged between two scrapes.
    since_step: int | None = None

    @property
    def onset_step(self) -> int | None:
        return self.intervals[0].start_step

    @property
    def onset_seconds(self) -> float:
        return self.intervals[0].start

    def firing_seconds(self, eval_interval: float) -> float:
        """Total time firing (each firing evaluation counts one interval)."""
        return sum(i.end - i.start + eval_interval for i in self.intervals)

    def as_dict(self, eval_interval: float) -> dict[str, object]:
        return {
            "alert": self.alert,
            "severity": self.severity,
            "labels": self.labels,
            "onset_step": self.onset_step,
            "onset_seconds": self.onset_seconds,
            "since_step": self.since_step,
            "value": self.value,
            "firing_seconds": self.firing_seconds(eval_interval),
            "intervals": [[i.start_step, i.end_step] for i in self.intervals],
        }


def onsets(firings: Iterable[Firing], tl: Timeline, eval_interval: float) -> list[AlertOnset]:
    """Firing evaluations grouped per alert identity and split into uninterrupted episodes,
    ordered by onset (critical first at equal onsets)."""
    grouped: dict[tuple[str, tuple[tuple[str, str], ...]], list[Firing]] = {}
    for f in firings:
        grouped.setdefault((f.alert, f.labels), []).append(f)
    out = []
    for (alert, labels), fs in grouped.items():
        fs.sort(key=lambda f: f.seconds)
        lbl = dict(labels)
        onset = AlertOnset(
            alert,
            lbl.get("severity", ""),
            {k: v for k, v in lbl.items() if k not in COMMON_LABELS},
            fs[0].value,
        )
        start = prev = fs[0].seconds
        for f in fs[1:]:
            if f.seconds - prev > eval_interval * 1.5:
                onset.intervals.append(_interval(start, prev, tl))
                start = f.seconds
            prev = f.seconds
        onset.intervals.append(_interval(start, prev, tl))
        since = tl.value_at(
            ONSET, {"alertname": alert, "series": lbl.get("series", "")}, fs[0].seconds
        )
        onset.since_step = int(since) if since is not None and since == since else None
        out.append(onset)
    out.sort(key=lambda o: (o.onset_seconds, SEVERITY_ORDER.get(o.severity, 9), o.alert))
    return out


def _interval(start: float, end: float, tl: Timeline) -> Interval:
    return Interval(start, end, tl.step_at(start), tl.step_at(end))
