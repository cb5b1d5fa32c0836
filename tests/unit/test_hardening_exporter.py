"""Break-test regressions (issue 16, items 2, 3, 9, 13): the recording API keeps no user object,
never raises into the trainer, and every label it accepts is bounded."""

from __future__ import annotations

import gc
import logging
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from rlpulse.runtime import ingest
from rlpulse.runtime.drops import MAX_WARNED
from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.http import accepts_gzip
from rlpulse.runtime.store import MAX_LABEL_CHARS
from tests.conftest import samples, scrape, value

torch = pytest.importorskip("torch")


@pytest.fixture
def exp() -> Iterator[Exporter]:
    e = Exporter(port=0, addr="127.0.0.1", run_id="hard", gpu=False, host=False).start()
    yield e
    e.close()


def _dropped(text: str, reason: str) -> float:
    return value(text, "rlpulse_dropped_values_total", reason=reason)


def _series(text: str, name: str) -> list[dict[str, str]]:
    return [dict(lbls) for (n, lbls), _ in samples(text).items() if n == name]


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    __repr__ = __str__


# ---- item 2: log() takes plain floats at the call ------------------------------------------------


def test_a_tensor_changed_after_log_scrapes_the_logged_value(exp: Exporter) -> None:
    t = torch.tensor(3.0)
    arr = np.array(2.0)
    exp.log({"rl_entropy": t, "rl_kl_reference": arr})
    t.zero_()
    arr[()] = 0.0
    text = scrape(exp.url)
    assert value(text, "rl_entropy") == 3.0
    assert value(text, "rl_kl_reference") == 2.0


def test_log_keeps_no_reference_to_a_loss_and_its_autograd_graph(exp: Exporter) -> None:
    w = torch.ones(64, 64, requires_grad=True)
    loss = (w @ w).sum()
    graph = weakref.ref(loss)
    exp.log({"rl_loss": loss, "rl_entropy": torch.tensor(0.5, requires_grad=True)}, step=1)
    del loss
    gc.collect()
    assert graph() is None  # before any scrape: the pending snapshot holds only floats
    assert value(scrape(exp.url), "rl_loss") == 64 * 64 * 64


# ---- item 3: count/set/observe/phase never raise into the trainer --------------------------------

HOSTILE_CALLS: list[tuple[str, Any]] = [
    ("observe a requires_grad tensor", lambda e: e.observe(_H, torch.ones(3, requires_grad=True))),
    ("observe 10**400", lambda e: e.observe(_H, 10**400)),
    ("observe exemplars as a generator", lambda e: e.observe(_H, [1.0, 2.0], exemplars=_ids())),
    ("set a label whose str raises", lambda e: e.set("rl_grad_norm", 1.0, network=_Unprintable())),
    (
        "count a label whose str raises",
        lambda e: e.count("rl_tool_calls_total", tool=_Unprintable()),
    ),
    ("phase whose name's str raises", lambda e: _phase(e, _Unprintable())),
    ("count a name that is not hashable", lambda e: e.count(["rl_env_steps_total"])),  # type: ignore[arg-type]
]
_H = "rl_rollout_duration_seconds"


def _ids() -> Iterator[str]:
    yield from ("a", "b")


def _phase(e: Exporter, name: Any) -> None:
    with e.phase(name):
        pass


@pytest.mark.parametrize(("case", "call"), HOSTILE_CALLS, ids=[c[0] for c in HOSTILE_CALLS])
def test_direct_calls_with_hostile_values_never_raise(exp: Exporter, case: str, call: Any) -> None:
    call(exp)
    exp.flush()  # the call is applied off the caller's thread, in call order
    assert sum(exp.dropped.values()) + _nonfinite(exp) >= 1 or case.startswith("observe exemplars")
    scrape(exp.url)  # and the endpoint still renders


def _nonfinite(exp: Exporter) -> float:
    return sum(
        exp.store.values[s.slot] for s in exp.store.series if s.metric.name.startswith("rl_nonf")
    )


def test_exemplars_from_a_generator_are_used(exp: Exporter) -> None:
    exp.observe(_H, [1.0, 2.0], exemplars=_ids())
    om = scrape(exp.url, accept="application/openmetrics-text; version=1.0.0")
    assert 'rollout_id="b"' in om
    assert value(scrape(exp.url), f"{_H}_count") == 2


def test_observe_of_a_huge_int_counts_it_non_finite(exp: Exporter) -> None:
    exp.observe(_H, 10**400)
    exp.log({"rl_entropy": 10**400})
    text = scrape(exp.url)
    assert value(text, "rl_nonfinite_values_total", metric=_H) == 1
    assert value(text, "rl_nonfinite_values_total", metric="rl_entropy") == 1


@pytest.mark.parametrize("strict", [False, True])
def test_hostile_direct_calls_raise_only_when_strict(strict: bool) -> None:
    e = Exporter(port=0, run_id="strict", gpu=False, host=False, strict=strict)
    for case, call in HOSTILE_CALLS:
        if case.startswith("observe exemplars"):
            continue
        if strict:
            with pytest.raises((ValueError, RuntimeError, TypeError)):
                call(e)
        else:
            call(e)


def _deep(n: int) -> dict[str, Any]:
    d: dict[str, Any] = {"lr": 1e-3}
    for _ in range(n):
        d = {"x": d}
    return d


def test_a_cyclic_or_1500_deep_config_is_counted_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cyclic: dict[str, Any] = {"lr": 1e-3}
    cyclic["self"] = cyclic
    with caplog.at_level(logging.WARNING, logger="rlpulse"):
        a = Exporter(port=0, run_id="cyc", gpu=False, host=False, config=cyclic)
        b = Exporter(port=0, run_id="deep", gpu=False, host=False, config=_deep(1500))
    assert a.dropped == {"bad_config": 1} and b.dropped == {"bad_config": 1}
    assert len([r for r in caplog.records if "bad_config" in r.getMessage()]) == 2
    with pytest.raises(ValueError, match="bad_config"):
        Exporter(port=0, run_id="deep", gpu=False, host=False, config=_deep(1500), strict=True)


# ---- item 9: every label is bounded --------------------------------------------------------------


def test_per_call_labels_are_capped() -> None:
    e = Exporter(port=0, addr="127.0.0.1", run_id="cap", gpu=False, host=False, label_cap=10)
    for i in range(1000):
        e.set("rl_grad_norm", 1.0, network=f"n{i}")
        e.set("rl_gpu_utilization_ratio", 0.5, gpu=str(i), uuid=f"GPU-{i}", model="m")
    text = e.start() and scrape(e.url)
    e.close()
    assert len(_series(text, "rl_grad_norm")) == 11  # 10 + __overflow__
    assert len(_series(text, "rl_gpu_utilization_ratio")) <= 11


def test_self_metrics_are_not_user_writable(exp: Exporter) -> None:
    exp.set("rlpulse_rollout_store_bytes", 1e12)
    exp.count("rlpulse_dropped_values_total", 5, reason="spoofed")
    exp.log({"rlpulse_label_overflow_total": 7.0, "rlpulse_collector_enabled": 1.0})
    text = scrape(exp.url)
    assert not any(
        s.get("reason") == "spoofed" for s in _series(text, "rlpulse_dropped_values_total")
    )
    assert not _series(text, "rlpulse_rollout_store_bytes")
    assert _dropped(text, "bad_metric") == 2
    assert _dropped(text, "self_metric") == 2


def test_the_documented_256_unmapped_keys_are_kept_and_the_rest_counted(exp: Exporter) -> None:
    exp.log({f"custom/k{i}": float(i) for i in range(300)})
    text = scrape(exp.url)
    keys = {s["key"] for s in _series(text, "rl_unmapped_metric")}
    assert len(keys) == 256 and "__overflow__" not in keys
    assert _dropped(text, "unmapped_key_cap") == 44


def test_one_new_key_per_step_stays_bounded(
    exp: Exporter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ingest, "MAX_BOUND_KEYS", 300)
    with caplog.at_level(logging.WARNING, logger="rlpulse"):
        for step in range(5000):
            exp.log({f"debug/new_key_{step}": 1.0}, step=step)
        text = scrape(exp.url)
    assert len(exp.ingest.bindings) + len(exp.ingest.slots) <= 300
    assert len(exp.drops.warned) <= MAX_WARNED + 1
    assert len(caplog.records) <= MAX_WARNED + 2
    assert _dropped(text, "unmapped_key_cap") == 5000 - 256


def test_a_1_mb_label_value_is_cut(exp: Exporter) -> None:
    exp.count("rl_tool_calls_total", tool="T" * 1_000_000)
    text = scrape(exp.url)
    (tool,) = [s["tool"] for s in _series(text, "rl_tool_calls_total")]
    assert tool == "T" * MAX_LABEL_CHARS
    assert len(text) < 100_000
    assert value(text, "rlpulse_label_overflow_total", label="tool") == 1


def test_a_run_id_longer_than_a_label_value_is_refused() -> None:
    with pytest.raises(ValueError, match="run_id"):
        Exporter(port=0, run_id="r" * (MAX_LABEL_CHARS + 1), gpu=False, host=False)


def test_threads_binding_one_new_series_get_one_series() -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        split = 0
        for _ in range(60):
            e = Exporter(port=0, run_id="race", gpu=False, host=False)
            go = threading.Barrier(6)

            def hit(e: Exporter = e, go: threading.Barrier = go) -> None:
                go.wait()
                e.set("rl_loss", float("nan"))  # binds rl_nonfinite_values_total{metric}

            threads = [threading.Thread(target=hit) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            e.flush()
            found = [s for s in e.store.series if s.metric.name == "rl_nonfinite_values_total"]
            split += len(found) != 1 or e.store.values[found[0].slot] != 6
    finally:
        sys.setswitchinterval(interval)
    assert split == 0


# ---- item 13 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [["1.5", "2"], np.array([1j, 2j]), "3.0"], ids=repr)
def test_observe_refuses_text_and_complex_as_log_does(exp: Exporter, bad: Any) -> None:
    exp.observe(_H, bad)
    text = scrape(exp.url)
    assert _dropped(text, "non_numeric") == 1
    assert value(text, f"{_H}_count") == 0


def test_a_dropped_values_repr_is_cut_in_the_log(
    exp: Exporter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rlpulse"):
        exp.log({"rl_entropy": list(range(200_000)), "rl_loss": "prompt " * 10_000})
        scrape(exp.url)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all(len(m) < 400 for m in messages)


def test_an_explicit_gzip_wins_over_a_refused_star() -> None:
    assert accepts_gzip("*;q=0, gzip")
    assert accepts_gzip("gzip, *;q=0")
    assert not accepts_gzip("gzip;q=0, *")
    assert accepts_gzip("*")
