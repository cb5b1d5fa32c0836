"""Every python and bash block of README.md, docs/quickstart.md and docs/integrations/*.md runs
as written, each in a fresh process in an empty folder (``RLPULSE_PORT=0``: any free port). A
block that names a hub model runs with a tiny local model in its place, as its doc says. A block
marked ``<!-- rlpulse-doc-test: stack (…) -->`` runs against a real Prometheus in the test its
marker names; one marked ``daemon (…)`` serves until stopped, so it passes once its /metrics
answers and is then stopped; one marked ``skip (why)`` is skipped for the reason it gives."""

from __future__ import annotations

import os
import string
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import scrape
from tests.doc_blocks import REPO, Block, blocks
from tests.stackutil import free_port, ready, wait_for

DOCS = [REPO / "README.md", REPO / "docs" / "quickstart.md"] + sorted(
    (REPO / "docs" / "integrations").glob("*.md")
)
BLOCKS = [b for doc in DOCS for b in blocks(doc)]
HUB_MODELS = ("Qwen/Qwen2.5-0.5B-Instruct",)
VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny causal LM (a 1-layer GPT-2 over characters) and its tokenizer, saved to disk."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
    vocab = {t: i for i, t in enumerate(specials + list(string.ascii_lowercase + " "))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        bos_token="[BOS]",
        eos_token="[EOS]",
    )
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=64,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    path = tmp_path_factory.mktemp("tiny-model")
    GPT2LMHeadModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


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
    port = free_port() if block.kind == "daemon" else 0
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "RLPULSE_PORT": str(port),
        "RLPULSE_FINAL_WAIT": "0",
    }
    if block.kind == "daemon":
        _serves_until_stopped(block, argv, tmp_path, env, f"http://127.0.0.1:{port}/metrics")
        return
    assert block.kind == "", f"{block.id}: unknown marker {block.kind!r}"
    run = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert run.returncode == 0, f"{block.id} failed:\n{run.stderr[-4000:]}"


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
    assert {b.path for b in BLOCKS} >= {"README.md", "docs/quickstart.md"}
    assert all(b.kind in ("", "skip", "stack", "daemon") for b in BLOCKS)
    assert all(b.why for b in BLOCKS if b.kind), "every marked block says why"
