"""A wrong-password flood against an exporter behind basic auth, beside a CPU-bound trainer.

    python benchmarks/bench_auth_flood.py [--clients 8] [--seconds 2]

Prints the trainer thread's steps per window without and with the flood (issue 16, item 5).
"""

from __future__ import annotations

import argparse
import base64
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt

from rlpulse.runtime.exporter import Exporter


def _steps(seconds: float) -> int:
    """CPU-bound Python work in this thread for ``seconds``: how many steps were done."""
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        sum(i * i for i in range(2000))
        n += 1
    return n


def _flood(url: str, stop: threading.Event, answers: list[int]) -> None:
    auth = "Basic " + base64.b64encode(b"prom:wrong-password").decode()
    while not stop.is_set():
        req = urllib.request.Request(url, headers={"Authorization": auth})
        try:
            urllib.request.urlopen(req, timeout=10).close()
            answers.append(200)
        except urllib.error.HTTPError as exc:
            answers.append(exc.code)
        except OSError:
            answers.append(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(10)).decode()
    with tempfile.TemporaryDirectory() as tmp:
        web = Path(tmp) / "web.yml"
        web.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
        exp = Exporter(
            port=0, addr="127.0.0.1", run_id="flood", gpu=False, host=False, web_config=web
        ).start()
        try:
            quiet = _steps(args.seconds)
            stop, answers = threading.Event(), []
            flood = [
                threading.Thread(target=_flood, args=(exp.url, stop, answers), daemon=True)
                for _ in range(args.clients)
            ]
            for t in flood:
                t.start()
            time.sleep(0.5)
            loud = _steps(args.seconds)
            stop.set()
            for t in flood:
                t.join()
        finally:
            exp.close()
    codes = {c: answers.count(c) for c in sorted(set(answers))}
    print(
        f"trainer steps per {args.seconds:g} s: quiet {quiet}, with {args.clients} clients "
        f"sending wrong passwords {loud} ({loud / quiet:.0%}); answers {codes}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
