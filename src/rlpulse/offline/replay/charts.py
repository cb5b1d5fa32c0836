"""PNG charts of a replayed run's key series, with alert onsets marked (matplotlib, the
``report`` extra)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from rlpulse import catalog
from rlpulse.offline.replay.onsets import AlertOnset

if TYPE_CHECKING:
    from rlpulse.offline.replay import ReplayResult

# The series a reader looks at first, in panel order; those the run lacks are left out.
CHART_METRICS = tuple(
    catalog.get(name)
    for name in (
        "rl_reward_mean",
        "rl_episode_return",
        "rl_eval_score",
        "rl_entropy",
        "rl_kl_reference",
        "rl_approx_kl",
        "rl_grad_norm",
        "rl_value_loss",
        "rl_response_length_mean_tokens",
        "rl_truncation_ratio",
        "rl_zero_std_groups_ratio",
        "rl_clip_fraction_ratio",
    )
)
MAX_PANELS = 8
COLORS = {"critical": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError(
            "charts need matplotlib: pip install 'rlpulse[report]' (or pip install matplotlib)"
        ) from None
    return plt


def _legend_label(key: str) -> str:
    labels = key.split("{", 1)[1].rstrip("}")
    own = [p for p in labels.split(",") if p.split("=", 1)[0] not in _IDENTITY]
    return ",".join(own) or key.split("{", 1)[0]


_IDENTITY = {*catalog.IDENTITY_LABELS, "job", "instance"}


def chart_png(result: ReplayResult) -> bytes | None:
    """One PNG with a panel per key series of the run (None if it has none of them)."""
    tl = result.timeline
    panels = [(m, tl.keys_of(m.name)) for m in CHART_METRICS]
    panels = [(m, keys) for m, keys in panels if keys][:MAX_PANELS]
    if not panels:
        return None
    plt = _pyplot()
    steps = [tl.step_at(i * tl.interval) for i in range(tl.scrapes)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.9 * len(panels) + 0.6), sharex=True)
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, (metric, keys) in zip(axes, panels, strict=True):
        for key in keys[:6]:
            pts = [
                (s, v)
                for s, v in zip(steps, tl.values(key), strict=True)
                if s is not None and v is not None
            ]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, drawstyle="steps-post", linewidth=1.2, label=_legend_label(key))
        ax.set_ylabel(metric.name.removeprefix("rl_"), fontsize=8)
        ax.tick_params(labelsize=7)
        if len(keys) > 1:
            ax.legend(fontsize=6, loc="best")
        _mark(ax, result.alerts)
    axes[-1].set_xlabel("step")
    axes[0].set_title(f"{result.run_id}: alert onsets marked", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _mark(ax: Any, alerts: list[AlertOnset]) -> None:
    seen: set[tuple[str, str]] = set()
    for a in alerts:
        if a.onset_step is None or (a.alert, a.severity) in seen:
            continue
        seen.add((a.alert, a.severity))
        color = COLORS.get(a.severity, "gray")
        ax.axvline(a.onset_step, color=color, linestyle="--", linewidth=0.9)
        ax.annotate(
            a.alert.removeprefix("RL"),
            (a.onset_step, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            fontsize=6,
            color=color,
            va="top",
            ha="right",
        )
