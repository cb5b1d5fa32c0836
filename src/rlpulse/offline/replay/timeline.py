"""A finished run's log turned into the series Prometheus would have scraped from it.

Each record goes through a real ``rlpulse.Exporter`` (``log()`` with the framework's key maps,
``observe_episodes`` for per-episode rows), exactly as in a live run; the exporter's registry is
read at every scrape time of a simulated clock. Run time comes from the log's own timestamps when
its first record has one, else from ``step * step_seconds``; it never runs backwards (a restarted
step counter holds the clock). The exporter starts one scrape before the first record, as in a
live run where it is up before the trainer's first log. A scrape sees the records logged up to
its time, as a real scrape would, so several records between two scrapes show only the last.

Bounded: the clock advances at most ``MAX_GAP_STEPS`` steps (or ``MAX_GAP_SECONDS`` of logged
time) between two records, so a step counter that jumps (to 1e6, to 1e300) or counts environment
steps instead of updates cannot stretch a replay over years of scrapes; unchanged scrapes cost
nothing. ``segments`` splits a log that holds several runs (``Record.segment``, or a step
counter that starts again) into one record stream per run.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rlpulse import catalog, keys
from rlpulse.offline.logs import Record, read_log
from rlpulse.runtime.exporter import Exporter

LAST_STEP_TS = catalog.get("rl_last_step_timestamp_seconds").name
START_TS = catalog.get("rl_exporter_start_timestamp_seconds").name
ENV_STEPS = catalog.get("rl_env_steps_total").name
UserKeys = Mapping[str, keys.Target | None]
NODE = "replay"
INSTANCE = "replay:9400"
MAX_GAP_STEPS = 10  # simulated clock: the most steps one record may advance it
MAX_GAP_SECONDS = 6 * 3600.0  # logged timestamps: the longest pause replayed as such


def series_key(name: str, labels: dict[str, str]) -> str:
    """``name{a="x",b="y"}`` with labels sorted and values escaped as PromQL expects."""
    parts = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{parts}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def label_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """The ``name="value"`` pairs of a label set as ``series_key`` or promtool writes it,
    unescaped and sorted (a value may hold commas and quotes)."""
    return tuple(sorted((k, _unquote(v)) for k, v in _PAIR.findall(text)))


def _unquote(raw: str) -> str:
    try:
        return str(json.loads(f'"{raw}"'))
    except json.JSONDecodeError:
        return raw


@dataclass
class Timeline:
    """Scraped series on a regular grid: scrape ``i`` happens at ``i * interval`` seconds."""

    run_id: str
    interval: float
    scrapes: int = 0
    # series key -> [(first scrape index, value)], a new entry only where the value changes
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    record_times: list[float] = field(default_factory=list)
    record_steps: list[int] = field(default_factory=list)

    @property
    def duration(self) -> float:
        """Seconds from the first to the last scrape."""
        return max(self.scrapes - 1, 0) * self.interval

    def step_at(self, seconds: float) -> int | None:
        """The step of the last record logged at or before ``seconds`` (None before the first)."""
        i = bisect.bisect_right(self.record_times, seconds + 1e-9)
        return self.record_steps[i - 1] if i else None

    def values(self, key: str) -> list[float | None]:
        """The value of series ``key`` at every scrape (None before it first appears)."""
        out: list[float | None] = [None] * self.scrapes
        runs = self.series.get(key, [])
        for n, (start, v) in enumerate(runs):
            end = runs[n + 1][0] if n + 1 < len(runs) else self.scrapes
            out[start:end] = [v] * (end - start)
        return out

    def value_at(self, metric: str, labels: Mapping[str, str], seconds: float) -> float | None:
        """The value at the scrape of ``seconds`` of the first series of ``metric`` carrying
        every label of ``labels`` (None: no such series, or not yet scraped)."""
        want = set(labels.items())
        index = round(seconds / self.interval) if self.interval else 0
        for key in self.keys_of(metric):
            if want <= set(label_pairs(key[len(metric) :])):
                at = bisect.bisect_right([i for i, _ in self.series[key]], index) - 1
                return self.series[key][at][1] if at >= 0 else None
        return None

    def keys_of(self, metric: str) -> list[str]:
        """The series keys of one sample name."""
        return [k for k in self.series if k.split("{", 1)[0] == metric]

    def _observe(self, index: int, sample: dict[str, float]) -> None:
        for key, value in sample.items():
            runs = self.series.setdefault(key, [])
            if not runs or not _same(runs[-1][1], value):
                runs.append((index, value))


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class Replayer:
    """Feeds records into an exporter and reads it as Prometheus would."""

    def __init__(
        self,
        run_id: str,
        framework: str | None,
        job: str,
        key_map: UserKeys | None,
        reference_band: str | Path | None = None,
        episode_env_steps: bool = True,
    ) -> None:
        self.episode_env_steps = episode_env_steps
        self.exporter = Exporter(
            port=0,
            run_id=run_id,
            rank=0,
            local_rank=0,
            node=NODE,
            metadata={"framework": framework or "", "host": NODE, "git_sha": "replay"},
            gpu=False,
            host=False,
            process=False,
            key_map=key_map,
            reference_band=reference_band,
        )
        self.target = {"job": job, "instance": INSTANCE}

    def apply(self, rec: Record, now: float) -> None:
        exp = self.exporter
        exp.clock = lambda: now  # step times on the simulated clock (the run's own cadence)
        if rec.kind == "episode":
            exp.observe_episodes([rec.values["r"]], [rec.values["l"]], rec.values.get("is_success"))
            if self.episode_env_steps:
                exp.count(ENV_STEPS, rec.values["l"])
            exp.log({}, step=rec.step)
        else:
            exp.log(rec.values, step=rec.step)
        exp.flush()
        exp.set(LAST_STEP_TS, now)  # the simulated clock, not the wall clock of the replay

    def scrape(self) -> dict[str, float]:
        out = {series_key("up", self.target): 1.0}
        for family in self.exporter.registry.collect():
            for s in family.samples:
                out[series_key(s.name, {**s.labels, **self.target})] = float(s.value)
        return out


class Clock:
    """The simulated run time of each record, in order (see the module docstring): the first
    record one scrape in, then the log's own timestamps or ``step * step_seconds``, bounded,
    never backwards; with ``rows`` each new step one scrape after the step before, whatever the
    log's times (every logged step seen by a scrape: the detector's lead in logged steps, what a
    run slower than the scrape interval meets). ``scale`` < 1 compresses the whole run
    (``replay``'s evaluation budget)."""

    def __init__(
        self, scrape_interval: float, step_seconds: float, scale: float = 1.0, rows: bool = False
    ) -> None:
        self.scrape_interval = scrape_interval
        self.step_seconds = step_seconds
        self.scale = scale
        self.rows = rows
        self.now = 0.0
        self._origin: float | None = None  # the first record's timestamp (0 without one)
        self._real = False  # run time from the log's timestamps
        self._last_step = 0
        self._skipped = 0.0  # logged seconds of pauses longer than MAX_GAP_SECONDS left out

    def __call__(self, rec: Record) -> float:
        """The run time of ``rec``, the next record."""
        if self._origin is None:  # the exporter starts one scrape before the first record
            self._origin = rec.timestamp or 0.0
            self._real = rec.timestamp is not None and not self.rows
            self._last_step = rec.step
            self.now = self.scrape_interval
        if self._real and rec.timestamp is not None:
            gap = (rec.timestamp - self._origin - self._skipped) * self.scale
            t = self.scrape_interval + gap
            if t - self.now > MAX_GAP_SECONDS * self.scale:  # replay MAX_GAP_SECONDS of a pause
                self._skipped += (t - self.now) / self.scale - MAX_GAP_SECONDS
                t = self.now + MAX_GAP_SECONDS * self.scale
        elif self.rows:
            t = self.now + (rec.step != self._last_step) * self.scrape_interval * self.scale
        else:
            steps = min(max(rec.step - self._last_step, 0), MAX_GAP_STEPS)
            t = self.now + steps * self.step_seconds * self.scale
        self.now, self._last_step = max(self.now, t), rec.step
        return self.now


def run_seconds(
    records: Iterable[Record], scrape_interval: float, step_seconds: float, rows: bool = False
) -> float:
    """How long a run's replay lasts (its last record's time on an unscaled ``Clock``)."""
    clock = Clock(scrape_interval, step_seconds, rows=rows)
    for rec in records:
        clock(rec)
    return clock.now


def build(
    records: Iterable[Record],
    *,
    run_id: str,
    framework: str | None,
    job: str,
    scrape_interval: float,
    step_seconds: float,
    key_map: UserKeys | None = None,
    time_scale: float = 1.0,
    reference_band: str | Path | None = None,
    rows: bool = False,
    episode_env_steps: bool = True,
) -> Timeline:
    """The scraped series of one run's records, on a ``Clock`` (``time_scale`` compresses it,
    ``rows`` paces it by logged steps); ``key_map`` (``rlpulse.keys.user_map``) comes before the
    framework tables, as live; a ``reference_band`` file compares the run with earlier healthy
    runs, as live. ``episode_env_steps``: an episode's length counts environment steps (a
    Monitor file alone; off where the rows log the env-step total, as SB3's callback does)."""
    replayer = Replayer(run_id, framework, job, key_map, reference_band, episode_env_steps)
    tl = Timeline(run_id, scrape_interval)
    clock = Clock(scrape_interval, step_seconds, time_scale, rows)
    dirty = True  # the exporter changed since the last scrape was read
    for rec in records:
        if not tl.record_times:
            replayer.exporter.set(LAST_STEP_TS, 0.0)
            replayer.exporter.set(START_TS, 0.0)
        now = clock(rec)
        due = math.ceil(now / scrape_interval - 1e-9)  # scrapes before ``now``
        if due > tl.scrapes:
            if dirty:  # unchanged scrapes add nothing to the run-length encoded series
                tl._observe(tl.scrapes, replayer.scrape())
                dirty = False
            tl.scrapes = due
        replayer.apply(rec, now)
        dirty = True
        tl.record_times.append(now)
        tl.record_steps.append(rec.step)
    if not tl.record_times:
        raise ValueError("the log holds no metric records")
    tl._observe(tl.scrapes, replayer.scrape())
    tl.scrapes += 1
    return tl


class _RunKey:
    """``groupby`` key of a log's records: (segment, restarts of its step counter so far)."""

    def __init__(self) -> None:
        self.segment: str | None = None
        self.step = 0
        self.part = 0

    def __call__(self, rec: Record) -> tuple[str, int]:
        if rec.segment != self.segment:
            self.segment, self.part = rec.segment, 0
        elif rec.step < self.step:
            self.part += 1
        self.step = rec.step
        return rec.segment, self.part


def segments(records: Iterable[Record]) -> Iterator[tuple[str, Iterator[Record]]]:
    """(segment name, its records) for each run in a log, streamed. A run ends where the
    record's ``segment`` changes or, inside one segment, where the step goes backwards (a
    restarted counter); the n-th restart of a run is named ``<segment> #<n+1>``."""
    for (name, part), group in itertools.groupby(records, _RunKey()):
        yield " ".join(p for p in (name, f"#{part + 1}" if part else "") if p), group


_FORMAT_FRAMEWORK = {
    "trl": "trl",
    "verl-log": "verl",
    "verl-jsonl": "verl",
    "sb3-eval-json": "sb3",
    "rllib-json": "rllib",
    "rllib-csv": "rllib",
    "dopamine": "dopamine",
    "deepspeed-chat": "deepspeed-chat",
}


def framework_hint(path: Path, fmt: str) -> str | None:
    """The key-map framework a log format implies (searched first by ``keys.resolve``); for a
    JSONL dump, the table that knows most of its first row's keys."""
    if fmt in _FORMAT_FRAMEWORK:
        return _FORMAT_FRAMEWORK[fmt]
    if fmt == "jsonl":
        first = next(iter(read_log(path, fmt)), None)
        return None if first is None else keys.likely_framework(first.values)
    if fmt == "sb3-csv":
        with open(path, encoding="utf-8", errors="replace") as fh:
            header = fh.readline()
        # SB3's logger writes section/key columns; OpenAI baselines' plain names
        return "sb3" if header.startswith("#") or "/" in header else "baselines"
    return None
