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
from collections.abc import Iterator

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


def one_line(text: str) -> str:
    """Text from elsewhere (a directory name, a message) fit for one line of the UI: clean, and every run
    of whitespace, line breaks included, one space."""
    return " ".join(sanitize_text(text).split())


NAME_CAP = 96  # a name from the network (job id, node name) shown in at most this many characters
# Controls and bidi overrides, plus the other invisible format characters a name could hide behind.
_NAME_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def shown_name(name: str, cap: int = NAME_CAP) -> str:
    """A name from the network (a job id, a node name) fit to show: every control, bidi override or
    invisible character written visibly as an escape (so two ids never look alike and none moves the
    cursor), and a long name cut to `cap` characters with a mark. The original stays the data: this is
    only for eyes."""
    shown = _NAME_UNSAFE.sub(lambda m: ascii(m.group(0))[1:-1], name)
    return shown if len(shown) <= cap else shown[: cap - 1] + "…"


def _has_c1_intro(text: str) -> bool:
    return any(c in text for c in "\x9b\x90\x98\x9d\x9e\x9f")


def cap_line(line: str, cap: int = DEFAULT_LINE_CAP) -> str:
    """Cut a line longer than `cap` characters, saying how much was dropped."""
    if len(line) <= cap:
        return line
    return line[:cap] + TRUNCATION_MARK.format(n=len(line) - cap)


# ---------------------------------------------------------------- the bytes fast path for whole chunks
#
# Python's regex engine scans ~10 ns per character, too slow to run over every byte of a busy log. So a
# chunk of complete UTF-8 lines is cleaned with memchr-speed bytes methods: the one escape nearly every
# line carries (Ray's SGR colour around its prefix) goes with one literal-prefixed regex; if anything
# unsafe is left, only the lines holding it go through `sanitize_text`.

_SGR_BYTES = re.compile(
    rb"\x1b\[(?:2m\x1b\[36m|[0-9;]*m)"
)  # Ray wraps every prefix in \e[2m\e[36m: one match, not two
_UNSAFE_BYTES = frozenset((*range(0, 9), *range(11, 32), 0x7F))
# UTF-8 of C1 controls (U+0080-U+009F) is 0xC2 0x80-0x9F; the bidi overrides start with 0xE2.
_C1_LEAD, _BIDI_LEAD = 0xC2, 0xE2
_BIDI_BYTES = tuple(chr(c).encode() for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))
# all of them in one pass: 0xE2 leads every box and block character too (a tqdm bar), so a find per
# override cost nine passes over nearly every real chunk
_BIDI_ANY = re.compile(b"\xe2(?:\x80[\xaa-\xae]|\x81[\xa6-\xa9])")  # exactly _BIDI_BYTES
# Controls a log holds by mistake (a binary blob, a torn write): counted as unreadable when dropped.
STRAY_CONTROLS = frozenset(_UNSAFE_BYTES - {0x07, 0x0D, 0x1B})
_NOT_STRAY = bytes(b for b in range(256) if b not in STRAY_CONTROLS)
# Deleting every other byte leaves only the rare ones: one C-speed pass tells which are present.
_SCAN_DELETE = bytes(b for b in range(256) if b not in _UNSAFE_BYTES | {_C1_LEAD, _BIDI_LEAD})


def _find_all(data: bytes, needle: bytes) -> Iterator[int]:
    pos = data.find(needle)
    while pos >= 0:
        yield pos
        pos = data.find(needle, pos + 1)


def _dirty_positions(data: bytes, present: set[int]) -> list[int]:
    """Byte offsets of everything that needs cleaning, given which rare bytes the chunk holds."""
    found: list[int] = []
    for code in present - {_C1_LEAD, _BIDI_LEAD}:
        found.extend(_find_all(data, bytes((code,))))
    if _C1_LEAD in present:
        found.extend(p for p in _find_all(data, b"\xc2") if p + 1 < len(data) and 0x80 <= data[p + 1] <= 0x9F)
    if _BIDI_LEAD in present:
        found.extend(m.start() for m in _BIDI_ANY.finditer(data))
    return found


def _last_cr_state(line: bytes) -> bytes:
    """What a terminal would show of a line rewritten with carriage returns: its last non-empty segment."""
    for segment in reversed(line.split(b"\r")):
        if segment:
            return segment
    return b""


def clean_chunk(data: bytes) -> bytes:
    """Sanitise a chunk of complete, valid UTF-8 lines (ends with a newline); line count is preserved."""
    return clean_chunk_counted(data)[0]


def clean_chunk_counted(data: bytes) -> tuple[bytes, int]:
    """`clean_chunk`, and how many stray control bytes it dropped (`STRAY_CONTROLS`: not the tab, CR, ESC
    and BEL that logs carry on purpose): counted from the few rare bytes the one scan found, at no cost."""
    if b"\x1b" in data:
        data = strip_sgr(data)
    rare = data.translate(None, _SCAN_DELETE)
    if not rare:
        return data, 0
    stray = len(rare.translate(None, _NOT_STRAY)) if rare.strip(b"\r") else 0
    return _clean_rare(data, rare), stray


def strip_sgr(data: bytes) -> bytes:
    """`_SGR_BYTES.sub(b"", data)`, byte for byte, about a tenth cheaper on a Ray log (two matches a line):
    the pattern has no group and never matches empty, so the pieces between matches joined are exactly what
    `sub` returns, and `split` skips `sub`'s per-match handling of the (empty) replacement. (Literal
    `bytes.replace` of the few codes a log uses costs more than the regex: a scan per code, and a removal can
    join two fragments into a new code the regex would have left.)"""
    return b"".join(_SGR_BYTES.split(data))


def _clean_rare(data: bytes, rare: bytes) -> bytes:
    positions = _dirty_positions(data, set(rare))
    if not positions:
        return data
    starts = sorted({data.rfind(b"\n", 0, p) + 1 for p in positions})
    only_cr = rare.strip(b"\r") == b""  # the common dirty case: a tqdm bar's carriage returns
    out, last = [], 0
    for start in starts:
        if start < last:
            continue
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        out.append(data[last:start])
        if only_cr:
            out.append(_last_cr_state(data[start:end]))
        else:
            out.append(sanitize_text(data[start:end].decode("utf-8", errors="replace")).encode("utf-8"))
        last = end
    out.append(data[last:])
    return b"".join(out)
