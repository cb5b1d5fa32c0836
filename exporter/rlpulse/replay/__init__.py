"""``rlpulse replay``: would rlpulse have paged on this finished run?

A log is read (``rlpulse.logs``), fed through a real exporter on a simulated clock
(``timeline``), and the generated alert rules are evaluated over it by promtool (``promtool``);
``onsets`` says which alerts fired from which step, ``report`` writes it up with charts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlpulse.logs import read_log, resolve_format
from rlpulse.replay.onsets import AlertOnset, onsets
from rlpulse.replay.promtool import evaluate
from rlpulse.replay.timeline import Timeline, build, framework_hint
from rlpulse.stack.config import Config, seconds

DEFAULT_STEP_SECONDS = 60.0


@dataclass
class ReplayResult:
    """One replayed log: its series and the alerts the rules raised on them."""

    log: Path
    format: str
    framework: str | None
    timeline: Timeline
    alerts: list[AlertOnset]
    eval_interval: float

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
            "alerts": [a.as_dict(self.eval_interval) for a in self.alerts],
        }


def run_id_of(path: Path) -> str:
    """The run label of a replayed log: the file stem (a run directory's name)."""
    return path.name if path.is_dir() else path.stem


def replay(
    path: Path | str,
    *,
    fmt: str = "auto",
    cfg: Config | None = None,
    step_seconds: float = DEFAULT_STEP_SECONDS,
    framework: str | None = None,
    run_id: str | None = None,
) -> ReplayResult:
    """Replay one log through the generated rules of ``cfg`` (default: the shipped defaults)."""
    if not step_seconds > 0:
        raise ValueError(f"--step-seconds must be positive, got {step_seconds!r}")
    cfg = cfg or Config()
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such log file or directory")
    name = resolve_format(p, fmt)
    fw = framework or framework_hint(p, name)
    tl = build(
        read_log(p, name),
        run_id=run_id or run_id_of(p),
        framework=fw,
        job=cfg.scrape.job_name,
        scrape_interval=seconds(cfg.scrape.interval),
        step_seconds=step_seconds,
    )
    interval = seconds(cfg.scrape.evaluation_interval)
    return ReplayResult(p, name, fw, tl, onsets(evaluate(tl, cfg), tl, interval), interval)


__all__ = ["DEFAULT_STEP_SECONDS", "ReplayResult", "replay"]
