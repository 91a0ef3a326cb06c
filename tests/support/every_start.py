"""The reference the scan engines are compared with: every start of a needle, overlapping ones too."""

from __future__ import annotations


def every_start(text: str, needle: str) -> list[int]:
    """Each position where `needle` starts in `text`, ascending (repeated `str.find` from one past each)."""
    out, pos = [], text.find(needle)
    while pos >= 0:
        out.append(pos)
        pos = text.find(needle, pos + 1)
    return out
