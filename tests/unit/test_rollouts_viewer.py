"""The rollout viewer's pages over real HTTP: orders, filters, groups, two steps side by side,
hostile text escaped under a CSP that forbids script, and hostile query parameters a 400."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlpulse.cli import main
from rlpulse.rollouts import Recorder, SamplingConfig
from rlpulse.rollouts.server import routes as server_routes
from rlpulse.rollouts.server import serve
from rlpulse.rollouts.viewer import routes as viewer_routes
from rlpulse.runtime.http import Request

HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)>"\u202egnp.exe\x1b[2J'


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("viewer")
    rec = Recorder("grpo", data_dir=d, sampling=SamplingConfig(per_step=100, seed=0))
    for step in (10, 20):
        correct = np.array([1.0, 0.0, 1.0, 0.0])
        fmt = np.array([1.0, 1.0, 0.5, 0.0]) * (2 if step == 20 else 1)
        rec.record(
            step=step,
            rollout_ids=[f"s{step}-{i}" for i in range(4)],
            group_ids=[f"s{step}-g{i // 2}" for i in range(4)],
            prompts=[f"prompt {step}/{i // 2}" for i in range(4)],
            responses=[
                HOSTILE if i == 1 else f"answer {step}/{i}" + "x" * (i * 400) for i in range(4)
            ],
            rewards=correct + fmt,
            components={"correct": correct, "format": fmt},
            lengths=[5, 50, 500, 5000],
            errors=[None, None, None, "grader timed out"],
        )
    rec.close()
    srv = serve(d)
    yield f"http://127.0.0.1:{srv.port}"
    srv.close()


def get(url: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def shown(html: str) -> list[str]:
    """The rollout ids a page shows, in order."""
    return re.findall(r'<article class=rollout id="r-([^"]+)"', html)


def test_orders_ranges_and_filters(base: str) -> None:
    page = f"{base}/view?run=grpo"
    assert shown(get(page)[2])[:4] == ["s20-0", "s20-1", "s20-2", "s20-3"]  # newest step first
    assert shown(get(f"{page}&order=best&limit=3")[2]) == [
        "s20-0",
        "s20-1",
        "s20-2",
    ]  # ties: newest
    assert shown(get(f"{page}&order=worst&step_min=10&step_max=10")[2])[0] == "s10-3"
    assert shown(get(f"{page}&order=longest&limit=1")[2]) == ["s20-3"]
    assert shown(get(f"{page}&order=errors")[2]) == ["s20-3", "s10-3"]
    assert shown(get(f"{page}&q=ANSWER%2010/2")[2]) == ["s10-2"]
    assert shown(get(f"{page}&component={quote('format>1.5')}")[2]) == ["s20-0", "s20-1"]
    one, two = (shown(get(f"{page}&order=random&seed=7&limit=4&offset={o}")[2]) for o in (0, 4))
    assert sorted(one + two) == sorted(f"s{s}-{i}" for s in (10, 20) for i in range(4))
    group = get(f"{page}&group=s20-g1&order=best")[2]
    assert shown(group) == ["s20-2", "s20-3"] and "2 completions of one prompt" in group
    assert group.count("prompt 20/1") == 1  # the group's prompt, once
    compare = get(f"{base}/compare?run=grpo&a=10&b=20")[2]
    left, right = compare.split("<section class=step-column>")[1:]
    assert shown(left)[0] == "s10-0" and shown(right)[0] == "s20-0"
    index = get(f"{base}/")[2]
    assert 'href="view?run=grpo"' in index and "correct, format" in index
    single = get(f"{base}/view?id=s10-2")[2]
    assert shown(single) == ["s10-2"] and "<details class=fold>" in single  # 800 chars fold


def test_hostile_text_is_escaped_under_a_strict_csp(base: str) -> None:
    status, headers, html = get(f"{base}/view?run=grpo&step_min=10&step_max=10")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    csp = headers["Content-Security-Policy"]
    assert (
        "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'none'" in csp
    )
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;&quot;" in html
    assert "\u202e" not in html and "\\u202egnp.exe\\x1b[2J" in html


@pytest.mark.parametrize(
    "query",
    [
        "view?run=grpo&order=sideways",
        "view?run=grpo&step_min=1e3",
        "view?run=grpo&step_min=5&step_max=1",
        "view?run=grpo&limit=-1",
        "view?run=grpo&offset=99999999999999999999999",
        "view?run=grpo&seed=x",
        "view?run=grpo&nonsense=1",
        "view?run=grpo&q=" + "a" * 2000,
        "view?run=grpo&component=format%3E%3E1",
        "view?run=grpo&since=-5",
        "view?run=grpo&worst=1&best=1",
        "view?run=grpo&id=x&order=best",
        "view",
        "compare?run=grpo&a=1&b=two",
        "?run=x",
    ],
)
def test_hostile_query_parameters_are_a_400_naming_them(base: str, query: str) -> None:
    status, headers, html = get(f"{base}/{query}")
    assert status == 400, html
    assert headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert "<p class=bad>" in html


def test_strange_run_ids_are_a_404(base: str) -> None:
    for run in ("%00", "..%2F..%2Fetc%2Fpasswd", "%ff%fe", "x" * 3000):
        status, _, html = get(f"{base}/view?run={run}")
        assert status == 404 and "no rollouts for run" in html


def test_the_cli_link_opens_the_same_rollouts(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder("cli", data_dir=tmp_path, sampling=SamplingConfig(per_step=100, seed=0))
    rec.record(step=3, rollout_ids=["a", "b", "c"], rewards=[0.1, 0.9, 0.5])
    rec.close()
    srv = serve(tmp_path)
    try:
        viewer = f"http://127.0.0.1:{srv.port}"
        code = main(
            ["rollouts", "list", "--run", "cli", "--data-dir", str(tmp_path), "--best", "2",
             "--step-min", "3", "--viewer-url", viewer]
        )  # fmt: skip
        out = capsys.readouterr().out
        assert code == 0
        link = re.search(r"open in the viewer: (\S+)", out)
        assert link and link.group(1) == f"{viewer}/view?run=cli&step_min=3&order=best&limit=2"
        assert shown(get(link.group(1))[2]) == ["b", "c"]
    finally:
        srv.close()


def test_rlpulse_rollouts_serve_serves_until_stopped(tmp_path) -> None:
    rec = Recorder("cli-served", data_dir=tmp_path, sampling=SamplingConfig(per_step=100, seed=0))
    rec.record(step=1, rollout_ids=["only"], rewards=[1.0], responses=["hello"])
    rec.close()
    binary = str(Path(sys.executable).with_name("rlpulse"))
    argv = [binary, "rollouts", "serve", "--data-dir", str(tmp_path), "--port", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        viewer = re.search(r"viewer at (http://127\.0\.0\.1:\d+)/", line)
        assert viewer, line  # loopback unless told otherwise
        assert shown(get(f"{viewer.group(1)}/view?run=cli-served")[2]) == ["only"]
        taken = subprocess.run(
            [*argv[:-1], viewer.group(1).rsplit(":", 1)[1]], capture_output=True, text=True
        )
        assert taken.returncode == 1 and "already in use" in taken.stderr  # one line, no trace
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


KNOWN = [
    "run",
    "step",
    "step_min",
    "step_max",
    "since",
    "until",
    "worst",
    "best",
    "order",
    "group",
    "q",
    "component",
    "limit",
    "offset",
    "seed",
    "id",
    "a",
    "b",
    "errors",
]


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=st.sampled_from(["/", "/view", "/compare", "/rollouts", "/rollout", "/runs"]),
    params=st.dictionaries(
        st.one_of(st.sampled_from(KNOWN), st.text(max_size=8)),
        st.lists(
            st.one_of(
                st.text(max_size=40),
                st.integers(-(2**70), 2**70).map(str),
                st.floats(allow_nan=True, allow_infinity=True).map(str),
                st.sampled_from(["grpo", "best", "errors", "format>1", "1e309", "-0", "\x00"]),
            ),
            min_size=1,
            max_size=3,
        ),
        max_size=6,
    ),
)
def test_no_query_is_a_500(viewer_dir: Path, path: str, params: dict[str, list[str]]) -> None:
    handler = {**server_routes(viewer_dir), **viewer_routes(viewer_dir)}[path]
    request = Request("GET", path, params, Message(), ("127.0.0.1", 1))
    assert handler(request).status in (200, 400, 404)


@pytest.fixture(scope="module")
def viewer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    rec = Recorder("grpo", data_dir=d, sampling=SamplingConfig(per_step=100, seed=0))
    rec.record(
        step=[1, 2], rollout_ids=["x", "y"], rewards=[0.0, float("nan")], group_ids=["g", None]
    )
    rec.close()
    return d
