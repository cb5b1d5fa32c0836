"""``rlpulse replay``: would rlpulse have paged on this finished run?

A log is read (``rlpulse.offline.logs``), fed through a real exporter on a simulated clock
(``timeline``), and the generated alert rules are evaluated over it by promtool (``promtool``);
``onsets`` says which alerts fired from which step, ``report`` writes it up with charts.
A log that holds several runs (Dopamine's seeds, a digest's environments, a restarted step
counter) is replayed run by run (``replay_runs``), each under its own ``run_id``.

Time is bounded: promtool evaluates every rule at every evaluation interval, so a run that would
need more than ``max_evaluations`` of them (default ``MAX_EVALUATIONS``: ~42 h of run at 15 s) is
replayed on a compressed clock (``time_scale`` < 1, reported) that fits the budget.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlpulse import keys
from rlpulse.detect import band
from rlpulse.offline.logs import read_log, resolve_format
from rlpulse.offline.replay.onsets import AlertOnset, onsets
from rlpulse.offline.replay.promtool import evaluate
from rlpulse.offline.replay.timeline import Timeline, build, framework_hint, run_seconds, segments
from rlpulse.stack.config import Config, seconds

DEFAULT_STEP_SECONDS = 60.0
MAX_EVALUATIONS = 10_000


@dataclass
class ReplayResult:
    """One replayed log: its series and the alerts the rules raised on them."""

    log: Path
    format: str
    framework: str | None
    timeline: Timeline
    alerts: list[AlertOnset]
    eval_interval: float
    time_scale: float = 1.0  # < 1: the run's clock was compressed to fit the evaluation budget

    @property
    def run_id(self) -> str:
        return self.timeline.run_id

    def critical(self) -> list[AlertOnset]:
        return [a for a in self.alerts if a.severity == "critical"]

    def as_dict(self) -> dict[str, object]:
        tl = self.timeline
        return {
            "log": str(self.log),
            "run_id": self.run_id,
            "format": self.format,
            "framework": self.framework,
            "records": len(tl.record_steps),
            "first_step": tl.record_steps[0],
            "last_step": tl.record_steps[-1],
            "duration_seconds": tl.duration,
            "time_scale": self.time_scale,
            "alerts": [a.as_dict(self.eval_interval) for a in self.alerts],
        }


def run_id_of(path: Path) -> str:
    """The run label of a replayed log: the file stem (a run directory's name)."""
    return path.name if path.is_dir() else path.stem


def replay_runs(
    path: Path | str,
    *,
    fmt: str = "auto",
    cfg: Config | None = None,
    step_seconds: float = DEFAULT_STEP_SECONDS,
    framework: str | None = None,
    run_id: str | None = None,
    key_map: Mapping[str, object] | str | Path | None = None,
    max_evaluations: int = MAX_EVALUATIONS,
    runs: Collection[str] | None = None,
    reference_band: str | Path | None = None,
    rows: bool = False,
) -> list[ReplayResult]:
    """Replay every run of one log through the generated rules of ``cfg`` (default: the
    shipped defaults). ``key_map`` (a mapping or a YAML/JSON file, ``rlpulse.keys.user_map``)
    adds to and overrides ``cfg.keys``. A run after the first is labelled ``<run_id>/<name>``
    (its segment, or ``#2`` … for a restarted step counter); ``runs`` picks runs by that name
    (``{"DQN #2"}``), the others are not evaluated. A run longer than ``max_evaluations``
    evaluation intervals is compressed to fit (0: never). ``reference_band`` (a file ``rlpulse
    band build`` wrote) compares each run with earlier healthy runs, as live. ``rows`` replays
    each logged step one scrape after the one before, whatever the log's times (``Clock``): how
    many logged steps the rules need, apart from how fast the run logged them."""
    if not step_seconds > 0:
        raise ValueError(f"--step-seconds must be positive, got {step_seconds!r}")
    if max_evaluations < 0:
        raise ValueError(f"--max-evaluations must be >= 0, got {max_evaluations!r}")
    cfg = cfg or Config()
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such log file or directory")
    user_keys = {**dict(cfg.keys), **keys.user_map(key_map, "--key-map")}
    if reference_band is not None:
        band.load(reference_band)  # a band that cannot be read is an error here, not a notice
    name = resolve_format(p, fmt)
    fw = framework or framework_hint(p, name)
    base = run_id or run_id_of(p)
    interval, scrape = seconds(cfg.scrape.evaluation_interval), seconds(cfg.scrape.interval)
    budget = max_evaluations * interval or math.inf
    lengths = [
        (seg, run_seconds(recs, scrape, step_seconds, rows))
        for seg, recs in segments(read_log(p, name))
    ]
    unknown = set(runs or ()) - {seg for seg, _ in lengths}
    if unknown:
        names = ", ".join(repr(seg) for seg, _ in lengths[:10])
        raise ValueError(f"{p}: no run named {sorted(unknown)}; its runs: {names}")
    results = []
    for (segment, records), (_, length) in zip(segments(read_log(p, name)), lengths, strict=True):
        if runs is not None and segment not in runs:
            continue
        scale = min(1.0, budget / length)
        tl = build(
            records,
            run_id=f"{base}/{segment}" if segment else base,
            framework=fw,
            job=cfg.scrape.job_name,
            scrape_interval=scrape,
            step_seconds=step_seconds,
            key_map=user_keys,
            time_scale=scale,
            episode_env_steps=name != "sb3-run",
            reference_band=reference_band,
            rows=rows,
        )
        alerts = onsets(evaluate(tl, cfg), tl, interval)
        results.append(ReplayResult(p, name, fw, tl, alerts, interval, scale))
    if not results:
        raise ValueError(f"{p}: the log holds no metric records")
    return results


def replay(path: Path | str, **options: Any) -> ReplayResult:
    """Replay a log of one run (``replay_runs`` takes the same options); ValueError naming
    the runs when the log holds several."""
    results = replay_runs(path, **options)
    if len(results) > 1:
        names = ", ".join(r.run_id for r in results[:4])
        raise ValueError(f"{path}: holds {len(results)} runs ({names} …); use replay_runs")
    return results[0]


__all__ = ["DEFAULT_STEP_SECONDS", "MAX_EVALUATIONS", "ReplayResult", "replay", "replay_runs"]
