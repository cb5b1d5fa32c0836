"""Free-form run metadata (``metadata={"env": ..., "algo": ...}``) is kept as extra labels of
``rl_run_info`` (bounded in count and length); names Prometheus would rename or refuse are
dropped as ``bad_metadata``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.runinfo import MAX_EXTRA_METADATA
from tests.conftest import promtool_check_metrics, samples, scrape, value


def _scrape_with(metadata: Mapping[str, Any]) -> str:
    """One scrape of an exporter started with ``metadata``."""
    exp = Exporter(port=0, addr="127.0.0.1", gpu=False, host=False, metadata=metadata).start()
    try:
        return scrape(exp.url)
    finally:
        exp.close()


def _info(text: str) -> dict[str, str]:
    [labels] = [dict(lbl) for (name, lbl) in samples(text) if name == "rl_run_info"]
    return labels


def test_free_form_keys_are_run_info_labels() -> None:
    meta = {"env": "FrozenLake-v1", "algo": "q-learning", "model": "tabular", "seed": 3}
    text = _scrape_with(meta)
    info = _info(text)
    assert info["env"] == "FrozenLake-v1" and info["algo"] == "q-learning" and info["seed"] == "3"
    assert info["model"] == "tabular"  # a catalog key stays where it was
    assert "rlpulse_dropped_values_total" not in text
    assert promtool_check_metrics(text).returncode == 0


def test_free_form_keys_are_bounded_and_checked() -> None:
    meta = {f"k{i}": "v" * 1000 for i in range(MAX_EXTRA_METADATA + 4)}
    meta |= {"job": "x", "__meta": "x", "not a label": "x", "run_id": "x", "x" * 65: "x"}
    text = _scrape_with(meta)
    info = _info(text)
    kept = [k for k in info if k.startswith("k")]
    assert len(kept) == MAX_EXTRA_METADATA and all(len(info[k]) == 256 for k in kept)
    assert not {"job", "__meta", "not a label"} & set(info) and info["run_id"] != "x"
    assert value(text, "rlpulse_dropped_values_total", reason="bad_metadata") == 4 + 5
    assert promtool_check_metrics(text).returncode == 0
