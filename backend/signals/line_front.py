"""Where a log's bytes become complete, sanitised lines: the log store's front (backend.signals.store).

Why its own room: the same cut runs in the store's writer thread and, for a saved log, in a second process
(backend.signals.front_process) whose lines the store then takes as they are, so replaying a big file
spends the console's one interpreter on the monitor and the screen, not on cutting lines. Pieces of a log
come split anywhere (even inside a UTF-8 character); what comes out is whole lines, valid UTF-8, without
NUL, stray controls or colour codes, each at most the line cap, with their lengths, and a count of what
could not be read (never a reason to refuse the log).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from backend.sanitize import DEFAULT_LINE_CAP, TRUNCATION_MARK, cap_line, clean_chunk_counted, sanitize_text
from backend.signals import grammar

# A log with no line feed in its first CR_SNIFF bytes but carriage returns is CR-only (old Mac line ends, some
# Windows tools' logs): its lines are split on CR, not kept as one line rewritten by `\r` (issue 36).
CR_SNIFF = 8 << 10
_BAD_UTF8 = re.compile("[\udc80-\udcff]")  # what `surrogateescape` makes of each invalid byte


@dataclass(frozen=True, slots=True)
class UnreadableBytes:
    """What of a log could not be read as text, counted, never a reason to refuse the log: crashed nodes
    leave NUL-padded tails, a torn write leaves invalid UTF-8, a binary blob stray controls."""

    nul: int = 0  # NUL bytes, dropped (a NUL-padded tail, a sparse head after copytruncate)
    invalid_utf8: int = 0  # bytes that are no UTF-8, each run shown as one U+FFFD
    controls: int = 0  # stray control bytes (not tab, LF, CR, ESC, BEL), dropped
    long_lines: int = 0  # lines over the store's cap, cut and marked

    @property
    def bytes(self) -> int:
        return self.nul + self.invalid_utf8 + self.controls

    def __bool__(self) -> bool:
        return bool(self.bytes or self.long_lines)

    def __add__(self, other: UnreadableBytes) -> UnreadableBytes:
        return UnreadableBytes(
            self.nul + other.nul,
            self.invalid_utf8 + other.invalid_utf8,
            self.controls + other.controls,
            self.long_lines + other.long_lines,
        )

    def __sub__(self, other: UnreadableBytes) -> UnreadableBytes:
        return UnreadableBytes(
            self.nul - other.nul,
            self.invalid_utf8 - other.invalid_utf8,
            self.controls - other.controls,
            self.long_lines - other.long_lines,
        )

    def text(self) -> str:
        """One line: how much and of what ("" when everything was read)."""
        parts = [
            f"{n:,} {what}"
            for n, what in (
                (self.nul, "NUL"),
                (self.invalid_utf8, "invalid UTF-8"),
                (self.controls, "control"),
            )
            if n
        ]
        said = f"{self.bytes:,} unreadable byte(s) dropped ({', '.join(parts)})" if parts else ""
        if self.long_lines:
            cut = f"{self.long_lines:,} line(s) over the line cap cut"
            said = f"{said}; {cut}" if said else cut
        return said

    def to_json(self) -> dict[str, int]:
        return {
            "bytes": self.bytes,
            "nul": self.nul,
            "invalid_utf8": self.invalid_utf8,
            "controls": self.controls,
            "long_lines": self.long_lines,
        }


@dataclass(frozen=True, slots=True)
class CutLines:
    """Complete lines, sanitised, each newline-terminated in `clean`, and each one's length without it."""

    clean: bytes
    lens: list[int]


def _cr_lines(data: bytes) -> bytes:
    """A CR-only log's bytes with every line end a line feed (a CRLF among them stays one line end)."""
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _cap_bytes(line: bytes, cap: int) -> bytes:
    return line if len(line) <= cap else cap_line(line.decode("utf-8", errors="replace"), cap).encode("utf-8")


class LineFront:
    """Pieces of one log in, complete sanitised lines out (`feed`, then `end` for the partial last line).
    Not thread-safe: its owner (the store's writer, the front process) calls it from one thread."""

    def __init__(self, line_cap: int = DEFAULT_LINE_CAP, *, caret_codes: bool = False) -> None:
        self.line_cap = line_cap
        self.unreadable = UnreadableBytes()
        self.cr_only: bool | None = None  # undecided until a line feed, or CR_SNIFF bytes without one
        self.pending = b""  # the partial last line
        self._pending_dropped = 0
        self.caret_codes = caret_codes  # the log spells colour codes as text (`^[[36m`)

    @property
    def holds(self) -> bool:
        """Whether a partial line waits (a hand-over to another front must wait for a line end)."""
        return bool(self.pending or self._pending_dropped)

    def feed(self, chunk: bytes | str) -> CutLines | None:
        """A piece of log, split anywhere: its complete lines (with the held partial line before them), or
        None when it completed none. A partial last line waits for its newline."""
        data = chunk.encode("utf-8", errors="replace") if isinstance(chunk, str) else bytes(chunk)
        if not data:
            return None
        if b"\x00" in data:  # memchr: dropped before lines are cut, so a NUL run never hides a line
            self._count(nul=data.count(b"\x00"))
            data = data.replace(b"\x00", b"")
        if self.cr_only is None:
            data = self._line_ends(data)
        elif self.cr_only:
            data = _cr_lines(data)
        cut = data.rfind(b"\n")
        if cut < 0:
            self._hold(data)
            return None
        marked = bool(self._pending_dropped)  # the held line's head comes cut, with its true count
        head = self._complete_lines(data, cut + 1)
        self.pending = b""
        self._hold(data[cut + 1 :])
        return self._cut(self._cleaned(head), marked=marked)

    def end(self) -> CutLines | None:
        """The partial last line too (end of the log), or None when none waits."""
        if not self.holds:
            return None
        if self.cr_only is None and not self._pending_dropped and b"\r" in self.pending.rstrip(b"\r"):
            self.cr_only = True  # a short log with carriage returns and never a line feed
            lines = _cr_lines(self.pending)
            self.pending = b""
            return self._cut(self._cleaned(lines if lines.endswith(b"\n") else lines + b"\n"))
        marked = bool(self._pending_dropped)
        head = self._join_pending(b"\n")
        self.pending = b""
        return self._cut(self._cleaned(head), marked=marked)

    @property
    def pending_text(self) -> str:
        """The partial last line, sanitised (shown, not stored)."""
        return cap_line(sanitize_text(self.pending.decode("utf-8", errors="replace")), self.line_cap)

    def _count(self, **more: int) -> None:
        self.unreadable = self.unreadable + UnreadableBytes(**more)

    def _line_ends(self, data: bytes) -> bytes:
        """Decide, once, whether the log ends its lines with CR alone; returns `data` as lines to cut."""
        if b"\n" in data:
            self.cr_only = False  # LF or CRLF: a CR inside a line is a progress bar's redraw
            return data
        held = len(self.pending) + len(data)
        if held < CR_SNIFF or (self.pending.count(b"\r") + data.count(b"\r")) < 2:
            return data
        self.cr_only = True
        data, self.pending = _cr_lines(self.pending + data), b""
        return data

    def _hold(self, data: bytes) -> None:
        """Keep a partial line, bounded: a progress bar keeps its last state, anything else its head."""
        if not data:
            return
        if self._pending_dropped:
            self._pending_dropped += len(data)
            return
        self.pending += data
        limit = 4 * self.line_cap
        if len(self.pending) > limit:
            last_cr = self.pending.rfind(b"\r", 0, len(self.pending) - 1)
            if last_cr >= 0 and len(self.pending) - last_cr - 1 <= limit:
                self.pending = self.pending[last_cr + 1 :]
            else:
                self._pending_dropped = len(self.pending) - self.line_cap
                self.pending = self.pending[: self.line_cap]

    def _complete_lines(self, data: bytes, end: int) -> bytes:
        """The held partial line and `data[:end]` as one bytes object, with one copy of the chunk, not two
        (a slice, then the join), or none when the chunk ends on a line end and nothing is held."""
        if self._pending_dropped:
            return self._join_pending(data[:end])
        if self.pending:
            return self.pending + memoryview(data)[:end]
        return data if end == len(data) else data[:end]

    def _join_pending(self, head: bytes) -> bytes:
        if self._pending_dropped:
            first_nl = head.find(b"\n")
            dropped = self._pending_dropped + first_nl
            self._pending_dropped = 0
            first = self.pending[: self.line_cap] + TRUNCATION_MARK.format(n=dropped).encode()
            return first + head[first_nl:]
        return self.pending + head

    def _cleaned(self, data: bytes) -> bytes:
        """A chunk of complete lines as valid UTF-8, sanitised, Ray's colour codes spelt as text gone."""
        if not data.isascii():  # ASCII (most logs) is valid UTF-8; isascii scans a word at a time, no copy
            try:
                data.decode("utf-8")  # the UTF-8 check
            except UnicodeDecodeError:
                data = self._readable(data)
        clean, stray = clean_chunk_counted(data)
        if stray:
            self._count(controls=stray)
        # Pasted logs spell Ray's colour codes out as `^[[36m`, on nearly every line: a chunk's head tells,
        # and once a log has shown them every chunk is checked whole.
        if clean.find(grammar.LITERAL_COLOUR_HINT, 0, None if self.caret_codes else 65536) >= 0:
            self.caret_codes = True
            clean = grammar.LITERAL_COLOUR_BYTES.sub(b"", clean)
        return clean

    def _cut(self, clean: bytes, *, marked: bool = False) -> CutLines:
        """The chunk and its line lengths, lines over the cap cut and marked (counted). `marked`: the first
        line was cut while held (its mark counts what its pieces dropped): counted, never cut again (its
        mark made it longer than the cap, and a second cut said only the mark's length was dropped)."""
        lines = clean.split(b"\n")
        lines.pop()  # the empty remainder after the final newline
        lens = list(map(len, lines))
        if max(lens, default=0) > self.line_cap:
            self._count(long_lines=sum(1 for n in lens if n > self.line_cap))
            lines = [b if marked and not i else _cap_bytes(b, self.line_cap) for i, b in enumerate(lines)]
            clean = b"\n".join(lines) + b"\n"
            lens = list(map(len, lines))
        return CutLines(clean, lens)

    def _readable(self, data: bytes) -> bytes:
        """Invalid UTF-8 counted byte by byte, each byte one U+FFFD (the text around it kept)."""
        text, bad = _BAD_UTF8.subn("\ufffd", data.decode("utf-8", errors="surrogateescape"))
        self._count(invalid_utf8=bad)
        return text.encode("utf-8")
