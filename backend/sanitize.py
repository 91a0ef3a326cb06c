"""Make text from a training process safe to show on the operator's terminal.

Anything a log line carries is hostile until proven otherwise: a CSI could move the cursor, an OSC 52
could write the operator's clipboard, an OSC 8 could hide a link, a bare C0/C1 control could switch
character sets. We drop every escape sequence whole (so no half-sequence leaks its payload as text), keep
only the last state of a `\\r`-rewritten progress bar, remove every remaining control but tab, and cap the
length of a line. The functions work on a whole chunk of lines at once: regexes over a chunk run at C speed,
which is what lets the log store keep up with a fast log.
"""

from __future__ import annotations

import re

# Longest line kept, in characters; longer lines are cut and marked.
DEFAULT_LINE_CAP = 16 * 1024
TRUNCATION_MARK = " …[truncated {n} chars]"

# Escape sequences, 7-bit (ESC-introduced) and 8-bit (C1-introduced). None of the classes match "\n", so a
# sequence never swallows a line break; an unterminated string sequence runs to the end of its line.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI (SGR colours, cursor moves, ...)
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"  # OSC/DCS/SOS/PM/APC
    r"|\x1b[ -/]*[0-~]?"  # any other ESC sequence (charset selection, keypad modes, RIS, ...)
)
# `\r` rewrites: everything up to the last `\r` that is followed by more text on the same line goes. Anchored
# at line starts so a long line costs one linear scan, not a quadratic one.
_CR_OVERWRITE = re.compile(r"^[^\n]*\r(?=[^\r\n])", re.MULTILINE)
# What may remain after the above: C0 (but tab and newline), DEL, C1, and Unicode bidi overrides
# ("Trojan Source"), which can make a line read differently from what it is.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Fast path: a chunk with none of these needs no cleaning at all.
_NEEDS_WORK = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def sanitize_text(text: str) -> str:
    """Clean a chunk of one or more lines; line breaks (`\\n`) are preserved, nothing else unsafe is."""
    if _NEEDS_WORK.search(text) is None:
        return text
    if "\x1b" in text or _has_c1_intro(text):
        text = _ESCAPES.sub("", text)
    if "\r" in text:
        text = _CR_OVERWRITE.sub("", text)
    return _CONTROLS.sub("", text)


def _has_c1_intro(text: str) -> bool:
    return any(c in text for c in "\x9b\x90\x98\x9d\x9e\x9f")


def cap_line(line: str, cap: int = DEFAULT_LINE_CAP) -> str:
    """Cut a line longer than `cap` characters, saying how much was dropped."""
    if len(line) <= cap:
        return line
    return line[:cap] + TRUNCATION_MARK.format(n=len(line) - cap)


def sanitize_line(line: str, cap: int = DEFAULT_LINE_CAP) -> str:
    """One line in, one safe line out (any `\\n` inside is treated as a line break and removed)."""
    return cap_line(sanitize_text(line).replace("\n", " "), cap)


def decode_bytes(data: bytes) -> str:
    """Bytes from a log as text; invalid UTF-8 becomes U+FFFD instead of failing."""
    return data.decode("utf-8", errors="replace")
