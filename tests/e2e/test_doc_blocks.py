"""Every python and bash block of README.md and docs/ runs as written, each in a fresh process in
an empty folder, with no rlpulse setting, while the real local stack runs (``rlpulse stack up
--fast``): a block that trains something prints where it is served, registered for Prometheus,
and leaves its run in Prometheus. A block that names a hub model runs with a tiny local model in
its place, as its doc says. A block marked ``<!-- rlpulse-doc-test: stack (…) -->`` runs against
a real Prometheus in the test its marker names; one marked ``daemon (…)`` serves until stopped,
so it passes once its /metrics answers and is then stopped; one marked ``skip (why)`` is skipped
for the reason it gives."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.doc_blocks import REPO, Block, blocks
from harness.runstack import StackUp, last, stack_up
from harness.stackutil import free_port, ready, wait_for
from tests.conftest import scrape

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCKS = [b for doc in DOCS for b in blocks(doc)]
HUB_MODELS = ("Qwen/Qwen2.5-0.5B-Instruct",)
VENV_BIN = str(Path(sys.executable).parent)
STARTS = ("rlpulse.start(", "Callback(", "Tracking(")  # a block that trains with rlpulse
SERVING = re.compile(r"serving at (https?)://127\.0\.0\.1:(\d+)/metrics(?: instead)? \(([^)]*)\)")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackUp]:
    """The local stack the blocks run beside, as a user's would."""
    with stack_up(tmp_path_factory.mktemp("doc-stack")) as up:
        yield up


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny causal LM of docs/integrations/trl.md (a 1-layer GPT-2 over characters), built
    by that doc's own block."""
    [build] = [b for b in BLOCKS if b.path.endswith("trl.md") and '"tiny-model"' in b.code]
    path = tmp_path_factory.mktemp("tiny")
    subprocess.run([sys.executable, "-c", build.code], cwd=path, check=True, timeout=300)
    return path / "tiny-model"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_block_runs_as_written(
    block: Block, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if block.kind == "skip":
        pytest.skip(block.why)
    if block.kind == "stack":
        pytest.skip(f"runs against a real Prometheus in {block.why}")
    code = block.code
    for hub in HUB_MODELS:
        if hub in code:
            code = code.replace(hub, str(request.getfixturevalue("tiny_model")))
    argv = [sys.executable, "-c", code] if block.lang == "python" else ["bash", "-ec", code]
    path = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    if block.kind == "daemon":  # stopped by a signal: off the stack, on a port of its own
        port = free_port()
        env = {**os.environ, "PATH": path, "RLPULSE_PORT": str(port)}
        _serves_until_stopped(block, argv, tmp_path, env, f"http://127.0.0.1:{port}/metrics")
        return
    assert block.kind == "", f"{block.id}: unknown marker {block.kind!r}"
    up: StackUp = request.getfixturevalue("stack")
    env = {**up.env, "PATH": path, "HF_HUB_OFFLINE": "1"}  # offline, as the docs run
    run = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert run.returncode == 0, f"{block.id} failed:\n{run.stderr[-4000:]}"
    served = SERVING.findall(run.stderr)
    if any(call in code for call in STARTS):
        assert served, f"{block.id} does not say where it serves:\n{run.stderr[-4000:]}"
    for _, port_, where in served:  # each run it served is in Prometheus
        assert where == f"registered for Prometheus at {up.targets}", run.stderr[-4000:]
        instance = f"127.0.0.1:{port_}"
        assert last(up.prometheus, f'rl_run_info{{instance="{instance}"}}'), (
            f"{block.id}: its run at {instance} is not in Prometheus:\n{run.stderr[-4000:]}"
        )


def _serves_until_stopped(
    block: Block, argv: list[str], cwd: Path, env: dict[str, str], url: str
) -> None:
    """Run a block that serves until stopped: it must answer on ``url``, then stop on SIGTERM."""
    with open(cwd / "stderr.log", "w+") as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for(lambda: proc.poll() is not None or ready(url), 120, f"{block.id} serving")
            assert proc.poll() is None, f"{block.id} exited:\n{(cwd / 'stderr.log').read_text()}"
            assert "rl_run_info" in scrape(url)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_every_doc_has_its_blocks_found() -> None:
    assert {b.path for b in BLOCKS} >= {"README.md", "docs/quickstart.md", "docs/rollouts.md"}
    assert all(b.kind in ("", "skip", "stack", "daemon") for b in BLOCKS)
    assert all(b.why for b in BLOCKS if b.kind), "every marked block says why"
