"""Showing untrusted model output: rollout text is escaped wherever it is displayed.

A response can hold terminal escape sequences (clear the screen, rewrite the title, fake a
prompt), carriage returns that overwrite a line, bidi overrides that reorder what a reader sees,
or HTML. ``terminal`` makes every such character visible as a ``\\x..``/``\\u....`` escape;
``html_safe_json`` encodes JSON so that no ``<``, ``>`` or ``&`` survives literally.
"""

from __future__ import annotations

import json
import re
from typing import Any

# C0/C1 controls and DEL, zero-width and bidi controls, line/paragraph separators, BOM,
# interlinear annotation, surrogates and Unicode tag characters.
_UNSAFE = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\ufeff\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f"
)
_INLINE = re.compile(f"[\t\n{_UNSAFE}]")
_BLOCK = re.compile(f"[{_UNSAFE}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def terminal(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control/invisible character escaped; newlines and tabs kept only
    when ``multiline``."""
    return (_BLOCK if multiline else _INLINE).sub(_escape, text)


def clip(text: str, width: int) -> str:
    """One escaped line of at most ``width`` characters (``…`` marks a cut)."""
    line = terminal(text)
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def html_safe_json(obj: Any, *, indent: int | None = None) -> str:
    """JSON (ASCII only) in which ``<``, ``>`` and ``&`` appear only as ``\\u`` escapes."""
    text = json.dumps(obj, ensure_ascii=True, indent=indent, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
