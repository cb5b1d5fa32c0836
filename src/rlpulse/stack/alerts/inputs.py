"""Input series of promtool scenarios: the labels of a test target and series in promtool's
expanding notation, shared by every alert definition's scenarios."""

from __future__ import annotations

from collections.abc import Callable

from rlpulse import catalog
from rlpulse.stack.promql import sel

TARGET = {"job": "rlpulse", "instance": "127.0.0.1:9400", "run_id": "r1", "rank": "0"}
RUN = {"job": "rlpulse", "run_id": "r1"}
GPU = {**TARGET, "gpu": "0", "uuid": "GPU-0", "model": "H100"}
HEALTHY_SAMPLES = 480  # an 8-hour healthy run at one sample a minute


def raw(name: str, labels: dict[str, str]) -> str:
    """A series outside the catalog (``up``, Prometheus' and Alertmanager's own metrics)."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def series(metric: catalog.Metric, labels: dict[str, str] = TARGET, suffix: str = "") -> str:
    """An input-series name in promtool notation, checked against the catalog."""
    return raw(sel(metric, suffix=suffix), labels)


def const(value: float, n: int) -> str:
    """``n`` samples of ``value``."""
    return f"{value:g}x{n - 1}" if n > 1 else f"{value:g}"


def ramp(start: float, step: float, n: int) -> str:
    """``n`` samples from ``start`` growing by ``step``."""
    return f"{start:g}{step:+g}x{n - 1}"


def counter(*segments: tuple[float, int]) -> str:
    """A counter from 0 growing ``rate`` per sample for ``n`` samples, segment after segment
    (the first sample is 0; each segment's samples come after the previous one's last)."""
    parts, value, first = [], 0.0, True
    for rate, n in segments:
        start = value if first else value + rate
        parts.append(ramp(start, rate, n))
        value = start + rate * (n - 1)
        first = False
    return " ".join(parts)


def noisy(start: float, end: float, amplitude: float, n: int, seed: int = 1) -> str:
    """``n`` samples on a line from ``start`` to ``end`` plus deterministic noise in
    [-amplitude, amplitude] (a small LCG, so the files are stable)."""
    out, x = [], seed
    for i in range(n):
        x = (1103515245 * x + 12345) % 2**31
        noise = (x / 2**31 * 2 - 1) * amplitude
        out.append(f"{start + (end - start) * i / max(n - 1, 1) + noise:.4g}")
    return " ".join(out)


def every(value_at: Callable[[int], float], n: int, period: int) -> str:
    """``n`` samples with a value only every ``period`` (a trainer that logs every N steps)."""
    return " ".join(f"{value_at(i):.4g}" if i % period == 0 else "_" for i in range(n))
