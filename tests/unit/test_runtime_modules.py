"""The runtime as one-job modules (issue 16): no runtime module imports the package facade
(``rlpulse/__init__.py`` imports the exporter), and the recording protocol is the API of the
facade, the exporter and the worker client (mypy holds the classes to its signatures)."""

from __future__ import annotations

import ast
from pathlib import Path

import rlpulse
from rlpulse import recording, workers
from rlpulse.exporter import Exporter

PACKAGE = Path(rlpulse.__file__).parent
RUNTIME = (
    "exporter",
    "options",
    "coerce",
    "ingest",
    "drops",
    "writes",
    "batches",
    "runinfo",
    "scrape",
    "lifecycle",
    "recording",
    "version",
    "workers",
)
CALLS = sorted(n for n in vars(recording.Recording) if not n.startswith("_"))


def test_no_runtime_module_takes_names_from_the_facade() -> None:
    for module in RUNTIME:
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "rlpulse":
                for alias in node.names:  # submodules only, never the facade's own names
                    found = (PACKAGE / f"{alias.name}.py").exists() or (
                        PACKAGE / alias.name
                    ).is_dir()
                    assert found, f"{module}.py takes {alias.name!r} from the facade"
            if isinstance(node, ast.Import) and module != "workers":  # workers: get_exporter()
                assert "rlpulse" not in [a.name for a in node.names], module


def test_the_facade_the_exporter_and_the_worker_client_offer_every_recording_call() -> None:
    assert CALLS == [
        "count",
        "log",
        "observe",
        "observe_episodes",
        "observe_rollouts",
        "phase",
        "set",
    ]
    assert set(CALLS) >= recording.SENT
    for api in (rlpulse, Exporter, workers.WorkerClient):
        missing = [c for c in CALLS if not callable(getattr(api, c, None))]
        assert not missing, (api, missing)
