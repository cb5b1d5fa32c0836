"""Acting on a run's own alerts (``rlpulse.control``) against a real Alertmanager: a paging
alert asks the trainer to save and stop, naming the last good step and the checkpoint; a
silenced or inhibited alert asks nothing; another run's alert is not ours; TLS, mutual TLS and
basic auth as elsewhere; an unreachable Alertmanager is counted and said once."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.amutil import alertmanager, post, silence
from harness.stackutil import free_port, wait_for
from rlpulse import catalog, control
from rlpulse.control.alertpoll import Alertmanager, AlertmanagerError
from rlpulse.detect import lastgood
from rlpulse.detect.signals import Detector
from rlpulse.runtime.exporter import Exporter
from tests.conftest import bcrypt_hash, make_pki, scrape, value

RUN = "ctl-run"
ENTROPY = lastgood.Level("entropy_ratio_to_peak", False, 0.2, "Policy entropy", "fraction")
LEVELS = {"RLEntropyCollapse": ENTROPY}


@pytest.fixture(scope="module")
def am(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Alertmanager on 127.0.0.1 (plain HTTP); its URL."""
    with alertmanager(tmp_path_factory.mktemp("am")) as url:
        yield url


def _post(url: str, name: str, severity: str, run_id: str = RUN, **labels: str) -> None:
    post(url, name, severity, run_id, **labels)


def _collapse(exp: Exporter, steps: range, onset: int) -> None:
    """Entropy healthy, then falling to 5 % of its peak from step ``onset``."""
    for step in steps:
        exp.log({"rl_entropy": 1.0 if step < onset else 0.05}, step=step)
    exp.flush()


def test_onset_is_the_first_step_of_the_latest_bad_run() -> None:
    d = Detector()
    for step, v in enumerate([1.0] * 10 + [0.01] * 3 + [1.0] * 10 + [0.01] * 8, start=100):
        d.observe("rl_entropy", (), v)
        d.step(step, float(step))
    # the smoothed ratio (median of 5) falls past 20 % at the third bad value of each run (step
    # 125 for the raw drop at 123): the failure began at 123, the last good step is 122
    assert d.onset("entropy_ratio_to_peak", "", ENTROPY.bad) == (122, 123)
    assert d.onset("entropy_ratio_to_peak", "", lambda v: v > 2) is None
    assert d.onset("kl_reference_level", "", ENTROPY.bad) is None


def test_the_last_good_step_counts_steps_not_values() -> None:
    d = Detector()
    for step in range(1, 11):
        d.observe("rl_entropy", (), 1.0)
        d.step(step, float(step))
    for _ in range(3):  # one step logs three bad values: it is the onset, the step before good
        d.observe("rl_entropy", (), 0.01)
    d.step(11, 11.0)
    assert d.onset("entropy_ratio_to_peak", "", ENTROPY.bad) == (10, 11)


def test_checkpoint_at_or_before_the_last_good_step() -> None:
    cps = lastgood.Checkpoints()
    for step in (100, 200, 300):
        cps.add(step, f"/ckpt/checkpoint-{step}", float(step))
    assert cps.at_or_before(250) == (200, "/ckpt/checkpoint-200")
    assert cps.at_or_before(200) == (200, "/ckpt/checkpoint-200")
    assert cps.at_or_before(99) is None
    assert cps.before_time(300.0) == (200, "/ckpt/checkpoint-200")


@pytest.mark.parametrize(
    "spec",
    ["critical=stop,warning=none,RLEntropyCollapse=save", {"critical": "stop", "warning": None}],
)
def test_policy_by_name_then_severity(spec: Any) -> None:
    rules = control.policy(spec)
    assert rules["critical"] == "stop" and rules["warning"] is None


@pytest.mark.parametrize("bad", ["critical=halt", "critcal=stop", "critical"])
def test_a_bad_policy_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(ValueError, match="on_alert"):
        control.policy(bad)


def test_a_paging_alert_saves_then_stops_naming_the_last_good_step(am: str) -> None:
    exp = Exporter(port=0, run_id=RUN, gpu=False, host=False).start()
    out = io.StringIO()
    try:
        c = control.Control(
            exp, {"critical": "stop"}, Alertmanager(am), interval=0.1, levels=LEVELS, out=out
        )
        _collapse(exp, range(1, 60), onset=40)
        c.checkpoint_saved(20, "/ckpt/checkpoint-20")
        c.checkpoint_saved(45, "/ckpt/checkpoint-45")  # after the onset: not a resume point
        _post(am, "RLEntropyCollapse", "warning", signal="entropy_ratio_to_peak")
        _post(am, "RLEntropyCollapse", "critical", signal="entropy_ratio_to_peak")
        _post(am, "RLEntropyCollapse", "critical", run_id="other-run")
        c.start()
        wait_for(lambda: c.should_stop() or None, 20, "the stop request")
        assert c.should_save()
        request = c.action()
        assert request is not None and request.alert.labels["run_id"] == RUN
        last = request.last_good
        assert (last.step, last.onset) == (39.0, 40.0)
        assert last.checkpoint == (20.0, "/ckpt/checkpoint-20")
        c.checkpoint_saved(59, "/ckpt/checkpoint-59")
        assert not c.should_save() and c.should_stop()
        text = scrape(exp.url)
        assert value(text, "rl_last_good_step", alertname="RLEntropyCollapse") == 39
        resume = catalog.get("rl_resume_checkpoint_step").name
        assert (
            value(text, resume, alertname="RLEntropyCollapse", checkpoint="/ckpt/checkpoint-20")
            == 20
        )
        line = c.stopped(59)
        assert exp.outcome == ("stopped", "RLEntropyCollapse")
    finally:
        exp.close()
    assert line == (
        "rlpulse: stopped at step 59 on RLEntropyCollapse (critical): resume from "
        "checkpoint-20 (step 20); Policy entropy (entropy_ratio_to_peak) below 20% from step 40; "
        "last good step 39"
    )
    assert line in out.getvalue()


def test_a_loop_that_breaks_on_should_stop_and_just_ends_is_stopped(am: str) -> None:
    """No ``stopped()`` call: the normal end is recorded as stopped (no page) and the resume
    line is still printed."""
    exp = Exporter(port=0, run_id=f"{RUN}-ends", gpu=False, host=False).start()
    out = io.StringIO()
    c = control.Control(
        exp, {"critical": "stop"}, Alertmanager(am), interval=0.1, levels=LEVELS, out=out
    )
    try:
        _collapse(exp, range(1, 60), onset=40)
        c.checkpoint_saved(20, "/ckpt/checkpoint-20")
        _post(am, "RLEntropyCollapse", "critical", f"{RUN}-ends", signal="entropy_ratio_to_peak")
        c.start()
        wait_for(lambda: c.should_stop() or None, 20, "the stop request")
    finally:
        exp.end(wait=0)  # what interpreter exit does after a normal end of the script
    assert exp.outcome == ("stopped", "RLEntropyCollapse")
    assert "rlpulse: stopped on RLEntropyCollapse (critical): resume from checkpoint-20" in (
        out.getvalue()
    )


def _control(exp: Exporter, url: str | Alertmanager, rules: dict[str, Any]) -> control.Control:
    source = url if isinstance(url, Alertmanager) else Alertmanager(url)
    return control.Control(exp, rules, source, interval=0.1, levels=LEVELS, out=io.StringIO())


def test_silenced_and_inhibited_alerts_ask_nothing(am: str) -> None:
    exp = Exporter(port=0, run_id="ctl-quiet", gpu=False, host=False)
    other = Exporter(port=0, run_id="ctl-cause", gpu=False, host=False)
    quiet = _control(exp, am, {"critical": "stop"})
    cause = _control(other, am, {"RLEntropyCollapse": "save", "RLRewardCollapse": "stop"})
    _collapse(exp, range(1, 60), onset=40)
    _collapse(other, range(1, 60), onset=40)
    silence(am, "ctl-quiet")
    _post(am, "RLEntropyCollapse", "critical", run_id="ctl-quiet")
    # a consequence held back by its cause: the cause acts (save), the consequence (stop) not
    _post(am, "RLEntropyCollapse", "critical", run_id="ctl-cause")
    _post(am, "RLRewardCollapse", "critical", run_id="ctl-cause")
    for _ in range(3):  # Alertmanager settles silences and inhibitions when alerts arrive
        quiet.poller.poll()
        cause.poller.poll()
    request = cause.action()
    assert request is not None and request.alert.name == "RLEntropyCollapse"
    assert cause.should_save() and not cause.should_stop()
    assert quiet.action() is None and not quiet.should_save() and not quiet.should_stop()
    cause.checkpoint_saved(7, "/ckpt/7")  # the save asked for: done, nothing pending
    assert cause.action() is None
    cause.poller.poll()  # the same firing acts once
    assert cause.action() is None


def test_unreachable_alertmanager_is_counted_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exp = Exporter(port=0, run_id="ctl-down", gpu=False, host=False).start()
    try:
        c = _control(exp, f"http://127.0.0.1:{free_port()}", {"critical": "stop"})
        for _ in range(3):
            c.poller.poll()
        text = scrape(exp.url)
    finally:
        exp.close()
    assert value(text, "rlpulse_alertmanager_errors_total", reason="unreachable") == 3
    assert caplog.text.count("cannot read run ctl-down's alerts") == 1
    assert not c.should_stop()


def test_tls_client_certificate_and_basic_auth(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    (tmp_path / "password").write_text("s3cret\n")
    web = {
        "tls_server_config": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_auth_type": "RequireAndVerifyClientCert",
            "client_ca_file": str(pki.ca),
        },
        "basic_auth_users": {"rl": bcrypt_hash("s3cret", 4)},
    }
    tls = {
        "ca_file": str(pki.ca),
        "cert_file": str(pki.client_cert),
        "key_file": str(pki.client_key),
    }
    with alertmanager(tmp_path, web) as url:
        good = Alertmanager(url, username="rl", password_file=str(tmp_path / "password"), **tls)
        wait_for(lambda: _reads(good), 30, "Alertmanager over mutual TLS")
        _post_tls(good, good._headers())  # the same credentials post the alert
        assert [a.name for a in good.alerts(RUN)] == ["RLEntropyCollapse"]
        with pytest.raises(AlertmanagerError) as refused:
            Alertmanager(url, **tls).alerts(RUN)
        assert refused.value.reason == "http_401"
        with pytest.raises(AlertmanagerError) as untrusted:
            Alertmanager(url).alerts(RUN)
        assert untrusted.value.reason == "unreachable"


def _reads(source: Alertmanager) -> bool | None:
    try:
        source.alerts(RUN)
    except AlertmanagerError:
        return None
    return True


def _post_tls(source: Alertmanager, headers: dict[str, str]) -> None:
    import json
    import urllib.request

    body = json.dumps(
        [{"labels": {"alertname": "RLEntropyCollapse", "severity": "critical", "run_id": RUN}}]
    ).encode()
    req = urllib.request.Request(
        f"{source.url}/api/v2/alerts",
        body,
        {**headers, "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10, context=source._tls()) as resp:
        assert resp.status == 200


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="go together"):
        Alertmanager("http://am:9093", username="rl")
    with pytest.raises(ValueError, match="https"):
        Alertmanager("http://am:9093", ca_file="/ca.pem")
    with pytest.raises(ValueError, match="unknown Alertmanager option"):
        Alertmanager.of({"url": "http://am:9093", "pasword_file": "/p"})
    with pytest.raises(ValueError, match="needs Alertmanager"):
        control.attach(Exporter(port=0, gpu=False, host=False), {"critical": "stop"})
