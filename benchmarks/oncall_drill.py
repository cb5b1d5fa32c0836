"""On-call drill (issue 23): a real fast stack, the demo scenarios and a kill -9; every
PagerDuty event checked and written as a table to docs/oncall-drill.md (``harness/drill.py``).

    python -m benchmarks.oncall_drill [--out docs/oncall-drill.md] [--only kl hacking ...]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from harness import drill


def main() -> int:
    parser = argparse.ArgumentParser(description=drill.__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/oncall-drill.md"))
    parser.add_argument("--only", nargs="*", choices=list(drill.SCENARIOS))
    parser.add_argument("--workdir", type=Path, default=Path(".rlpulse/drill"))
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)  # a drill reads only its own pages
    args.workdir.mkdir(parents=True)
    sent: list[str] = []
    checks = drill.drill(args.workdir, args.only, sent=sent)
    text = drill.table(checks)
    text += (
        "\nEvery PagerDuty event the stack sent during the drill, oldest first (triggers and "
        "resolves; a page not in the table above is a page nobody expected):\n\n"
        "| run | event | alert | summary |\n|---|---|---|---|\n" + "\n".join(sent) + "\n"
    )
    print(text)
    head = (
        "# On-call drill\n\nWritten by `python -m benchmarks.oncall_drill` (see its docstring): "
        "every PagerDuty event a real fast stack sent for the demo scenarios, what it said, and "
        "whether it was right.\n\n"
    )
    args.out.write_text(head + text)
    return 0 if all(c.right for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
