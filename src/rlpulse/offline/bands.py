"""A reference band (``rlpulse.detect.band``) built from finished healthy runs' logs.

Each run's records go through a real exporter as in a replay (the framework's key maps, the
detector's smoothing), so the band holds exactly what a live run's detector compares with: per
banded series, its raw and smoothed value at every logged step. A log that holds several runs
gives one reference each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rlpulse import keys
from rlpulse.detect import band
from rlpulse.offline.logs import Record, read_log, resolve_format
from rlpulse.offline.replay import run_id_of
from rlpulse.offline.replay.timeline import Replayer, framework_hint, segments


def reference(
    records: Sequence[Record], framework: str | None, key_map: Mapping[str, keys.Target | None]
) -> band.Reference:
    """What one run's detector saw of each banded series: (step, raw, smoothed) per value."""
    replayer = Replayer("band", framework, "band", key_map)
    detector = replayer.exporter.detector
    seen: dict[tuple[str, tuple[str, ...]], int] = {}
    out: dict[str, tuple[str, list[tuple[float, float, float]]]] = {}
    for i, rec in enumerate(records):
        replayer.apply(rec, float(i))
        for (metric, labels), t in list(detector.tracks.items()):  # (read up to the record)
            if metric not in band.BANDED or not t.warm or seen.get((metric, labels)) == t.n:
                continue
            seen[(metric, labels)] = t.n
            name = band.series_name(metric, labels)
            out.setdefault(name, (metric, []))[1].append((float(rec.step), t.last, t.smoothed))
    replayer.exporter.close()
    return out


def build(
    paths: Sequence[Path],
    *,
    fmt: str = "auto",
    framework: str | None = None,
    key_map: Mapping[str, object] | str | Path | None = None,
    tolerance: float = band.TOLERANCE,
) -> band.Band:
    """The band of every run in the logs at ``paths``."""
    user_keys = keys.user_map(key_map, "--key-map")
    refs: dict[str, band.Reference] = {}
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such log file or directory")
        name = resolve_format(p, fmt)
        fw = framework or framework_hint(p, name)
        for segment, records in segments(read_log(p, name)):
            run = f"{run_id_of(p)}/{segment}" if segment else run_id_of(p)
            refs[run if run not in refs else f"{run} ({p})"] = reference(
                list(records), fw, user_keys
            )
    return band.build(refs, tolerance)
