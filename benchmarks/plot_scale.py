"""docs/img/scale.png from the bench_scale.py measurements in benchmarks/results/scale-*.json.

    python benchmarks/plot_scale.py [--out docs/img/scale.png] [results/scale-*.json ...]

Left: series in Prometheus' head and Prometheus' RSS against ranks, with the straight-line fit
extrapolated to 1,024 ranks. Right: the time to answer every dashboard query that reads a
recording rule once (instant queries, the median of the repetitions each), against the rules and
with the rules inlined over raw per-rank series, on Prometheus and VictoriaMetrics.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
TARGET_RANKS = 1024


def load(paths: list[Path]) -> list[dict[str, Any]]:
    runs = [json.loads(p.read_text()) for p in paths]
    return sorted(runs, key=lambda r: r["ranks"])


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return slope, my - slope * mx


def extrapolate(
    runs: list[dict[str, Any]], ranks: int = TARGET_RANKS, interval: float = 15.0
) -> dict[str, float]:
    """The figures of ``ranks`` ranks from the measurements: series per target kind as measured
    (they do not depend on the job's size), recorded series and Prometheus RSS fitted linearly,
    samples/s as every series once per ``interval`` (the default 15 s scrape and evaluation)."""
    last = runs[-1]
    gpus = last["gpus_per_node"]
    nodes = -(-ranks // gpus)
    per = {k: v["max"] for k, v in last["scrapes"]["series_per_target"].items()}
    scraped = per["rank0"] + (nodes - 1) * per["node_leader"] + (ranks - nodes) * per["rank"]
    synthetic = 5 * ranks  # up, scrape_duration_seconds, ... per target
    rec = [
        r["prometheus"]["head_series"] - r["scrapes"]["series_total"] - 5 * r["ranks"] for r in runs
    ]
    r_slope, r_icpt = fit([r["nodes"] for r in runs], rec)
    recorded = r_slope * nodes + r_icpt
    head = scraped + synthetic + recorded
    m_slope, m_icpt = fit([r["prometheus"]["head_series"] for r in runs],
                          [r["prometheus"]["rss_bytes"] for r in runs])  # fmt: skip
    size = last["bytes_per_scrape"]
    counts = {"rank0": 1, "node_leader": nodes - 1, "rank": ranks - nodes}
    plain = sum(size[k]["openmetrics"] * n for k, n in counts.items())
    gz = sum(size[k]["openmetrics_gzip"] * n for k, n in counts.items())
    out = {
        "ranks": ranks,
        "nodes": nodes,
        "series_rank0": per["rank0"],
        "series_node_leader": per["node_leader"],
        "series_rank": per["rank"],
        "series_per_node": per["node_leader"] + (gpus - 1) * per["rank"] + 5 * gpus,
        "series_scraped": scraped,
        "series_recorded": recorded,
        "series_head": head,
        "bytes_per_round": plain,
        "bytes_per_round_gzip": gz,
        "samples_per_second": head / interval,
        "prometheus_bytes_per_series": m_slope,
        "prometheus_rss_baseline_bytes": m_icpt,
        "prometheus_rss_bytes": m_slope * head + m_icpt,
    }
    h_slope, _ = fit([r["prometheus"]["head_series"] for r in runs],
                          [r["prometheus"]["heap_inuse_bytes"] for r in runs])  # fmt: skip
    out["prometheus_heap_bytes_per_series"] = h_slope
    for store in ("prometheus", "victoriametrics"):
        for variant in ("recorded", "raw"):
            # p50 of one panel, and every fan-out panel once (a dashboard's worth): both grow
            # about linearly with ranks for raw series; p99 is left as measured (too noisy)
            ys = [r["queries"]["summary"][store][_key(variant)]["instant"]["p50"] for r in runs]
            slope, icpt = fit([r["ranks"] for r in runs], ys)
            out[f"{store}_{variant}_p50_seconds"] = max(slope * ranks + icpt, min(ys))
            ys = [fanout_total(r, store, variant) for r in runs]
            slope, icpt = fit([r["ranks"] for r in runs], ys)
            out[f"{store}_{variant}_total_seconds"] = max(slope * ranks + icpt, min(ys))
    return out


def _key(variant: str) -> str:
    return "fanout_recorded" if variant == "recorded" else variant


def fanout_total(r: dict[str, Any], store: str, variant: str) -> float:
    """Seconds to answer every fan-out panel query once (median of the repetitions each)."""
    return sum(
        p[f"{store}_{variant}"]["instant_ms"] / 1000
        for p in r["queries"]["panels"]
        if p["fans_out"]
    )


def table(runs: list[dict[str, Any]]) -> str:
    """A markdown table of the measurements and the extrapolation (docs/scaling.md)."""
    x = extrapolate(runs)
    cols = [str(r["ranks"]) for r in runs] + [f"{x['ranks']} (extrapolated)"]

    def row(name: str, vals: list[str]) -> str:
        return f"| {name} | " + " | ".join(vals) + " |"

    def q(r: dict[str, Any], store: str, variant: str) -> str:
        s = r["queries"]["summary"][store][_key(variant)]["instant"]
        total = fanout_total(r, store, variant)
        return f"{1000 * s['p50']:.1f} / {1000 * s['p99']:.0f} / {1000 * total:.0f}"

    def qx(store: str, variant: str) -> str:
        p50, total = (x[f"{store}_{variant}_{k}_seconds"] for k in ("p50", "total"))
        return f"~{1000 * p50:.0f} / - / ~{1000 * total:.0f}"

    mib = 2**20
    lines = [
        row("ranks", cols),
        row("---", ["---:"] * len(cols)),
        row("nodes", [str(r["nodes"]) for r in runs] + [str(x["nodes"])]),
        row(
            "series scraped (exporters)",
            [f"{r['scrapes']['series_total']:,.0f}" for r in runs]
            + [f"{x['series_scraped']:,.0f}"],
        ),
        row(
            "series in Prometheus' head",
            [f"{r['prometheus']['head_series']:,.0f}" for r in runs] + [f"{x['series_head']:,.0f}"],
        ),
        row(
            f"samples/s appended (scrape {runs[0]['scrape_interval']}; last column 15 s)",
            [f"{r['ingest']['prometheus_samples_per_second']:,.0f}" for r in runs]
            + [f"{x['samples_per_second']:,.0f}"],
        ),
        row(
            "rows/s into VictoriaMetrics",
            [f"{r['ingest']['victoriametrics_rows_per_second']:,.0f}" for r in runs]
            + [f"{x['samples_per_second']:,.0f}"],
        ),
        row(
            "Prometheus RSS, MiB",
            [f"{r['prometheus']['rss_bytes'] / mib:.0f}" for r in runs]
            + [f"~{x['prometheus_rss_bytes'] / mib:.0f}"],
        ),
        row(
            "rule groups: slowest evaluation, ms",
            [f"{1000 * r['prometheus']['rule_group_last_duration_max_seconds']:.0f}" for r in runs]
            + ["-"],
        ),
        row(
            "remote_write lag s / failed samples",
            [
                f"{w['lag_seconds']:.0f} / {w['samples_failed']:.0f}"
                for w in (r["remote_write"] for r in runs)
            ]
            + ["-"],
        ),
        row(
            "scrape duration p50 / p99, ms",
            [
                f"{1000 * r['scrapes']['duration_seconds']['all']['p50']:.1f} / "
                f"{1000 * r['scrapes']['duration_seconds']['all']['p99']:.1f}"
                for r in runs
            ]
            + ["(per target: as measured)"],
        ),
        row(
            "one scrape round, MB (gzip)",
            [_mb(_round_bytes(r, "openmetrics"), _round_bytes(r, "openmetrics_gzip")) for r in runs]
            + [_mb(x["bytes_per_round"], x["bytes_per_round_gzip"])],
        ),
    ]
    for store, short in (("prometheus", "Prometheus"), ("victoriametrics", "VM")):
        for variant, name in (("recorded", "rules"), ("raw", "raw")):
            lines.append(
                row(
                    f"{short} fan-out panels, {name}: p50 / p99 / all once, ms",
                    [q(r, store, variant) for r in runs] + [qx(store, variant)],
                )
            )
    return "\n".join(lines)


def _round_bytes(r: dict[str, Any], fmt: str) -> float:
    """Bytes of one scrape of every target of run ``r`` (sizes by target kind)."""
    counts = {"rank0": 1, "node_leader": r["nodes"] - 1, "rank": r["ranks"] - r["nodes"]}
    return float(sum(r["bytes_per_scrape"][k][fmt] * n for k, n in counts.items()))


def _mb(plain: float, gz: float) -> str:
    return f"{plain / 1e6:.1f} ({gz / 1e6:.2f})"


def plot(runs: list[dict[str, Any]], out: Path) -> None:
    ranks = [r["ranks"] for r in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))

    series = [r["prometheus"]["head_series"] for r in runs]
    rss = [r["prometheus"]["rss_bytes"] / 2**20 for r in runs]
    s_slope, s_icpt = fit(ranks, series)
    m_slope, m_icpt = fit(ranks, rss)
    xs = [0, TARGET_RANKS]
    left.plot(
        ranks, [s / 1000 for s in series], "o", color="C0", markersize=10, mfc="none",
        label="head series (measured)",
    )  # fmt: skip
    left.plot(xs, [(s_slope * x + s_icpt) / 1000 for x in xs], "--", color="C0", label="fit")
    left.set_xlabel("ranks (8 per node)")
    left.set_ylabel("thousand series", color="C0")
    twin = left.twinx()
    twin.plot(ranks, rss, "s", color="C3", label="Prometheus RSS (measured)")
    twin.plot(xs, [m_slope * x + m_icpt for x in xs], ":", color="C3", label="fit")
    twin.set_ylabel("Prometheus RSS, MiB", color="C3")
    left.set_title("Series and Prometheus memory")
    handles = left.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + twin.get_legend_handles_labels()[1]
    left.legend(handles, labels, loc="upper left", fontsize=8)

    for store, color in (("prometheus", "C0"), ("victoriametrics", "C2")):
        for variant, style in (("recorded", "-"), ("raw", "--")):
            name = "recording rules" if variant == "recorded" else "raw per-rank series"
            total = [1000 * fanout_total(r, store, variant) for r in runs]
            right.plot(ranks, total, style, marker="o", color=color, label=f"{store}, {name}")
    right.set_xlabel("ranks (8 per node)")
    right.set_ylabel("ms, every such panel queried once")
    right.set_title("Dashboard panels that read a recording rule")
    right.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "scale.png")
    args = ap.parse_args(argv)
    paths = args.results or sorted((ROOT / "benchmarks" / "results").glob("scale-*.json"))
    runs = load(paths)
    if len(runs) < 2:
        print("need at least two measurements", file=sys.stderr)
        return 2
    plot(runs, args.out)
    print(table(runs))
    print(json.dumps(extrapolate(runs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
