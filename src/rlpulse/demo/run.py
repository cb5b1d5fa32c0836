"""``rlpulse demo``: train a scenario and serve its metrics, printing progress."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

import numpy as np

import rlpulse
from rlpulse.demo import scenarios
from rlpulse.demo.grpo import StepStats, Trainer
from rlpulse.demo.publish import METADATA, publish_config, publish_step


@dataclass(frozen=True)
class DemoOptions:
    """What ``rlpulse demo`` was asked to do."""

    scenario: str = "healthy"
    steps: int = 2000
    port: int | None = None  # None: RLPULSE_PORT or 9400
    addr: str | None = None
    run_id: str | None = None
    step_delay: float = 0.0
    seed: int = 0
    onset: int = 0  # train healthy until this step, then switch to the scenario's settings
    progress_every: int = 50
    record: bool = True  # offer each step's rollouts to the trace store
    data_dir: str | None = None
    checkpoints: str | None = None  # folder of checkpoint-<step>.npy (policy weights)
    save_every: int = 0  # steps between checkpoints (0: only when an alert asks)
    log: str | None = None  # a JSON-lines file of each step's logged values (replay reads it)

    def check(self) -> None:
        """A clear error naming the bad option."""
        scenarios.get(self.scenario)
        for name in ("steps", "onset", "progress_every", "seed", "save_every"):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"--{name.replace('_', '-')} must be >= 0, not {getattr(self, name)}"
                )
        if not (self.step_delay >= 0 and math.isfinite(self.step_delay)):
            raise ValueError(f"--step-delay must be a finite number >= 0, not {self.step_delay}")
        if self.port is not None and not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in 0..65535, not {self.port}")


def _fmt(x: float | None) -> str:
    return "  -  " if x is None else f"{x:.3f}"


def progress_line(stats: StepStats, eval_score: float | None, ms_per_step: float) -> str:
    """One line a person watching the run reads."""
    m = stats.metrics
    return (
        f"step {stats.step:5d}  reward {_fmt(m['reward'])}  kl {_fmt(m['kl'])}  "
        f"entropy {_fmt(m['entropy'])}  len {m['completions/mean_length']:5.1f}  "
        f"trunc {m['completions/clipped_ratio']:.2f}  eval {_fmt(eval_score)}  "
        f"loss {_fmt(m['loss'])}  ({ms_per_step:.1f} ms/step)"
    )


def run_demo(
    opts: DemoOptions, out: TextIO | None = None, stop: threading.Event | None = None
) -> int:
    """Train ``opts.scenario`` for ``opts.steps`` steps while serving /metrics; 0 when done.

    ``stop`` (set from another thread) ends the run early, a hung collective included.
    """
    opts.check()
    out = out or sys.stdout
    scenario = scenarios.get(opts.scenario)
    stop = stop or threading.Event()
    start_kwargs: dict[str, Any] = {
        "run_id": opts.run_id,
        "addr": opts.addr,
        "config": scenario.config.hyperparameters(),
        "metadata": METADATA,
    }
    if opts.data_dir:
        start_kwargs["rollouts"] = {"data_dir": opts.data_dir}
    exp = rlpulse.start(opts.port, **start_kwargs)
    try:
        print(f"rlpulse demo: scenario {scenario.name}: {scenario.cause}", file=out)
        print(f"rlpulse demo: metrics at {exp.url} (run_id={exp.run_id})", file=out)
        if scenario.name != "healthy":
            when = f"from step {opts.onset + 1}, " if opts.onset else ""
            print(
                f"rlpulse demo: expect {when}within ~{scenario.within_steps} steps: "
                f"{scenario.signature}",
                file=out,
            )
        out.flush()
        trainer = scenario.trainer(opts.seed, opts.onset, phase=rlpulse.phase)
        threading.Thread(target=_release_on, args=(stop, trainer), daemon=True).start()
        with open(opts.log, "w", encoding="utf-8") if opts.log else nullcontext() as log:
            stopped = _train(opts, scenario, trainer, out, stop, log)
        if stopped:  # an alert of the run asked it to stop: ended, saying where to resume
            print(f"rlpulse demo: {stopped}", file=out, flush=True)
        elif not stop.is_set():  # every step trained: the run ends on purpose, nothing to page
            carried = rlpulse.finish()
            how = " (a last scrape carried the finish mark)" if carried else ""
            print(f"rlpulse demo: finished{how}", file=out)
    except KeyboardInterrupt:  # ended on purpose: a last scrape carries it, nothing pages
        print("rlpulse demo: interrupted", file=out)
        rlpulse.end("interrupted", "KeyboardInterrupt")
        return 130
    finally:
        stop.set()
        rlpulse.close()
    return 0


def _release_on(stop: threading.Event, trainer: Trainer) -> None:
    stop.wait()
    trainer.stop()


def _train(
    opts: DemoOptions,
    scenario: scenarios.Scenario,
    trainer: Trainer,
    out: TextIO,
    stop: threading.Event,
    log: IO[str] | None,
) -> str:
    """Train; the line ``rlpulse.stopped`` printed if an alert stopped the run, else ""."""
    published = None
    t0 = time.perf_counter()
    last, printed = None, 0
    for stats in scenario.run(trainer, opts.steps, opts.onset):
        if trainer.config is not published:
            published = trainer.config
            publish_config(published)
        publish_step(stats, record=opts.record)
        if log:
            log.write(log_line(stats))
        last = stats
        periodic = opts.save_every and stats.step % opts.save_every == 0
        if opts.checkpoints and (periodic or rlpulse.should_save()):
            rlpulse.checkpoint_saved(stats.step, _save(trainer, opts.checkpoints, stats.step))
        if rlpulse.should_stop():
            return rlpulse.stopped(stats.step)
        if opts.progress_every and (stats.step == 1 or stats.step % opts.progress_every == 0):
            ms = 1000 * (time.perf_counter() - t0) / stats.step
            print(progress_line(stats, trainer.last_eval, ms), file=out, flush=True)
            printed = stats.step
        hang = trainer.config.hang_at_step
        if hang is not None and stats.step + 1 >= hang and stats.step < opts.steps:
            print(
                f"rlpulse demo: step {stats.step + 1}: the gradient all-reduce waits for a peer "
                "that never arrives; training hangs, /metrics stays up (Ctrl-C to stop)",
                file=out,
                flush=True,
            )
        if stop.wait(opts.step_delay) if opts.step_delay else stop.is_set():
            break
    if last is not None and not stop.is_set():
        if printed != last.step:
            ms = 1000 * (time.perf_counter() - t0) / last.step
            print(progress_line(last, trainer.last_eval, ms), file=out)
        print(f"rlpulse demo: finished {last.step} steps", file=out, flush=True)
    return ""


def log_line(stats: StepStats) -> str:
    """One step as the JSON line ``--log`` writes: what ``rlpulse.log`` got, under TRL's keys,
    and the held-out score as ``eval_reward`` on the steps that evaluated."""
    row: dict[str, Any] = {"step": stats.step, **stats.metrics}
    if stats.eval_score is not None:
        row["eval_reward"] = stats.eval_score
    return json.dumps(row) + "\n"


def _save(trainer: Trainer, folder: str, step: int) -> str:
    """The policy's weights as ``folder/checkpoint-<step>.npy``; its path."""
    path = Path(folder) / f"checkpoint-{step}.npy"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, trainer.policy.W)
    return str(path)
