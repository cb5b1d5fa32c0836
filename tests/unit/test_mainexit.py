"""A ``raise SystemExit(n)`` of the script itself, which no exit hook sees, read back at exit by
``runtime/mainexit.py`` on every Python found here (3.11 reads the raise site; 3.12+ watches the
main module's calls). The module is stdlib only, so each interpreter loads it by its path."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MODULE = Path(__file__).parents[2] / "src" / "rlpulse" / "runtime" / "mainexit.py"
PRELUDE = f"""
import atexit, importlib.util
spec = importlib.util.spec_from_file_location("mainexit", {str(MODULE)!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
m.watch()
def said():
    ended, status = m.raised()
    print("ended", ended, "status", "unknown" if status is m.UNKNOWN else status)
atexit.register(said)
"""


def _version(python: str) -> tuple[int, int] | None:
    """``python``'s version, or None where it does not run (a pyenv shim of no version)."""
    ran = subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True
    )
    if ran.returncode:
        return None
    major, minor = ran.stdout.split()
    return int(major), int(minor)


def _pythons() -> dict[str, str]:
    """This interpreter, and each later one the machine has (pyenv's versions, or PATH)."""
    found = {f"{sys.version_info[0]}.{sys.version_info[1]}": sys.executable}
    for minor in (12, 13, 14):
        for named in [*sorted(glob.glob(f"/root/.pyenv/versions/3.{minor}.*/bin/python")),
                      shutil.which(f"python3.{minor}")]:  # fmt: skip
            if named and _version(named) == (3, minor):
                found.setdefault(f"3.{minor}", named)
    return found


PYTHONS = _pythons()
CASES = {
    "runs-to-its-end": ("x = 1", "ended False status unknown"),
    "raise-a-constant": ("raise SystemExit(2)", "ended True status 2"),
    "raise-a-module-name": ("CODE = 5\nraise SystemExit(CODE)", "ended True status 5"),
    "bare-raise": ("raise SystemExit", "ended True status 0"),
    "raise-a-message": ("raise SystemExit('bad input')", "ended True status 1"),
    "raised-deeper": ("def main():\n    raise SystemExit(7)\nmain()", "ended True status unknown"),
}
# a call's result, after a top-level loop of other calls: read on 3.12+ only
MAIN = "for i in range(3):\n    str(i)\ndef main():\n    return {}\nraise SystemExit(main())"


@pytest.mark.parametrize("version", list(PYTHONS))
@pytest.mark.parametrize("case", list(CASES))
def test_the_status_of_a_scripts_own_raise_is_read(version: str, case: str) -> None:
    body, expected = CASES[case]
    ran = subprocess.run(
        [PYTHONS[version], "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert expected in ran.stdout, ran.stdout + ran.stderr


@pytest.mark.parametrize("version", list(PYTHONS))
@pytest.mark.parametrize("status", [0, 3])
def test_raise_systemexit_of_main_is_read_where_python_allows(version: str, status: int) -> None:
    ran = subprocess.run(
        [PYTHONS[version], "-c", PRELUDE + MAIN.format(status)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    readable = version != "3.11"
    assert f"ended True status {status if readable else 'unknown'}" in ran.stdout, ran.stderr
    assert ran.returncode == status
