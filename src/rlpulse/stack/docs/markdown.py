"""Markdown table rows, as every generated page writes them."""

from __future__ import annotations


def row(*cells: object) -> str:
    """One Markdown table row of ``cells``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"
