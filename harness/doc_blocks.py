"""The code blocks of the documentation, as written: ``python`` and ``bash`` fenced blocks with
the HTML comment that may precede one (``<!-- rlpulse-doc-test: KIND (why) -->``), which says
how a test runs it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(
    r"(?:<!--\s*rlpulse-doc-test:\s*(?P<kind>[\w-]+)(?P<why>[^>]*?)-->\s*\n)?"
    r"^```(?P<lang>python|bash)\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language and code, and its test marker."""

    path: str
    line: int
    lang: str
    code: str
    kind: str  # "" when unmarked; else the marker's kind (stack, network, skip …)
    why: str

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every python/bash block of the Markdown file at ``path``."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code"))
        rel = path.relative_to(REPO).as_posix()
        why = m["why"].strip().strip("()").strip() if m["why"] else ""
        out.append(Block(rel, line, m["lang"], m["code"], m["kind"] or "", why))
    return out


def marked(path: Path, kind: str) -> Block:
    """The one block of ``path`` marked ``kind``."""
    [block] = [b for b in blocks(path) if b.kind == kind]
    return block
