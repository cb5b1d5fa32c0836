"""DeepSpeed-Chat step-3 (PPO RLHF) console logs (``deepspeed-chat``).

``main.py`` prints, per PPO step::

    epoch: 0|step: 12|ppo_ep: 1|act_loss: 0.21|cri_loss: 0.12|unsuper_loss: 0.0
    average reward score: -0.679
    ---------------------------------
    |E2E latency=7.99s |Gather latency=0.00s (0.00%) |Generate time=5.26s (65.81%) |...

(newer versions: ``Epoch: 0 | Step: 12 | PPO Epoch: 1 | Actor Loss: … | Critic Loss: …`` and
``Average reward score: …``). One record per step line; the reward and throughput lines that
follow it belong to it. Keys are the printed names in lower case with ``_`` for spaces
(``act_loss``, ``actor_loss``, ``average_reward_score``, ``e2e_latency``, ``generate_time`` …).
DeepSpeed's fp16 ``OVERFLOW! … Skipping step`` lines before a step line are counted into that
step's ``overflow_skipped_steps``. Every other line is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from rlpulse.offline.logs.base import LogFormatError, Record, lines, number

STEP_LINE = re.compile(r"^\s*epoch:\s*\d+\s*\|\s*step:\s*(\d+)\s*\|(.*)$", re.IGNORECASE)
REWARD_LINE = re.compile(r"^\s*average reward score:\s*(\S+)", re.IGNORECASE)
_TIMING = re.compile(r"([A-Za-z][A-Za-z0-9 ]*?)\s*=\s*([-+0-9.eE]+|nan|inf)s?\b", re.IGNORECASE)
OVERFLOW = "OVERFLOW!"


def _key(name: str) -> str:
    return "_".join(name.lower().split())


def is_step_line(line: str) -> bool:
    """Whether ``line`` is a DeepSpeed-Chat PPO step line."""
    return STEP_LINE.match(line) is not None


def _pairs(text: str, path: Path, where: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for pair in text.split("|"):
        name, sep, raw = pair.partition(":")
        v = number(raw.strip())
        if not sep or v is None:
            raise LogFormatError(path, where, f"cannot read {pair.strip()!r} as name: number")
        values[_key(name)] = v
    return values


def read_deepspeed_chat(path: Path) -> Iterator[Record]:
    """One record per PPO step line, with the reward and timing lines printed after it."""
    held: Record | None = None
    overflows = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in lines(path, fh):
            if m := STEP_LINE.match(line):
                if held is not None:
                    yield held
                where = f"line {lineno}"
                values = _pairs(m.group(2), path, where)
                values["overflow_skipped_steps"] = float(overflows)
                held, overflows = Record(int(m.group(1)), None, values, where), 0
            elif OVERFLOW in line:
                overflows += 1
            elif held is None:
                continue
            elif m := REWARD_LINE.match(line):
                v = number(m.group(1))
                if v is None:
                    raise LogFormatError(path, f"line {lineno}", f"reward {m.group(1)!r}")
                held.values["average_reward_score"] = v
            elif line.startswith("|") and "latency" in line.lower():
                for name, raw in _TIMING.findall(line):
                    v = number(raw)
                    if v is not None:
                        held.values[_key(name)] = v
    if held is not None:
        yield held
