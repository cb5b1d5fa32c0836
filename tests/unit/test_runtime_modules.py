"""The runtime as one-job modules (issue 16): no runtime module imports the package facade
(``rlpulse/__init__.py`` imports the exporter), and the recording protocol is the API of the
facade, the exporter and the worker client (mypy holds the classes to its signatures)."""

from __future__ import annotations

import ast
from pathlib import Path

import rlpulse
from rlpulse.runtime import recording, workers
from rlpulse.runtime.exporter import Exporter

PACKAGE = Path(rlpulse.__file__).parent
RUNTIME = sorted([*(f"runtime/{f.stem}" for f in (PACKAGE / "runtime").glob("*.py")), "version"])
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
            if (
                isinstance(node, ast.Import) and module != "runtime/workers"
            ):  # workers: get_exporter()
                assert "rlpulse" not in [a.name for a in node.names], module


def test_the_trainers_process_never_imports_the_generator_or_the_offline_tools() -> None:
    """runtime/, detect/ and control/ run inside the trainer: an alert's signal, level and
    direction come from ``rlpulse.alertindex`` or the ``alert_levels.yml`` it names, never
    from ``rlpulse.stack`` (lazy imports inside functions included)."""
    for part in ("runtime", "detect", "control"):
        for path in (PACKAGE / part).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for name in names:
                    assert not name.startswith(("rlpulse.stack", "rlpulse.offline")), path


def test_the_facade_the_exporter_and_the_worker_client_offer_every_recording_call() -> None:
    assert set(CALLS) <= set(rlpulse.__all__)  # the facade exports each call by name
    assert set(CALLS) >= recording.SENT
    for api in (rlpulse, Exporter, workers.WorkerClient):
        missing = [c for c in CALLS if not callable(getattr(api, c, None))]
        assert not missing, (api, missing)
