"""A saved log's lines cut in a second process, for the store that replays it.

Why: Python runs one thread at a time, and replaying a 1M-line log spent a third of its time cutting lines
(colour codes stripped, controls dropped, lengths counted: backend.signals.line_front) on the same
interpreter that draws the screen and runs the monitor. Here a child process runs the same front over the
file (an fd the parent opened through backend.regular_files and hands over: no second open, no race) and
writes each piece's cut lines to a pipe; the parent's store takes them as they are (`LogStore.add_cut`).
The parent reads the pipe with the interpreter free (a read waits outside it), so the cut runs on another
core. If the child fails, the parent goes on in its own thread from the last line end the child
delivered: the same lines either way (tests/unit/test_front_process.py compares).

A frame on the pipe: a header (`_HEAD`: flags, the bytes of text, the lines, the file offset just past
the last line end delivered, the four unreadable counts of this frame), then each line's length (32-bit),
then the text. A frame with the DONE flag ends the stream.
"""

from __future__ import annotations

import contextlib
import os
import queue
import struct
import subprocess
import sys
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path

from backend.errors import ConsoleError
from backend.regular_files import open_regular
from backend.signals.line_front import CutLines, LineFront, UnreadableBytes

PIECE = 4 << 20  # bytes of the file read per step in the child
AHEAD = 16  # frames the child may have cut before the parent took them (~64 MB: it starts with the app)
PIPE_SIZE = 1 << 20  # the pipe's buffer, where the kernel lets it grow (fewer wake-ups per frame)
_HEAD = struct.Struct("<8Q")
_DONE, _CARET = 1, 2
_MAX_FRAME = 1 << 31  # a header claiming more is no frame of ours


class FrontLost(ConsoleError):
    """The child stopped before the end of the log (killed, crashed, a broken frame)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One piece's cut lines, what of it was unreadable, and where in the file the next piece starts."""

    cut: CutLines
    unreadable: UnreadableBytes
    consumed: int  # the file offset just past the last line end delivered so far
    caret_codes: bool  # the log spells colour codes as text (the front learnt it)


class FrontProcess:
    """The parent's side: a child cutting `path` from `start` (a line start) to its end, frame by frame."""

    def __init__(
        self, path: Path, start: int, line_cap: int, *, caret_codes: bool = False, piece: int = PIECE
    ) -> None:
        self.consumed = start
        with open_regular(path, "log file") as fh:
            fd = fh.fileno()
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "backend.signals.front_process",
                    str(fd),
                    str(start),
                    str(line_cap),
                    "1" if caret_codes else "0",
                    str(piece),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=(fd,),
            )
        assert self._proc.stdout is not None
        self._out = self._proc.stdout
        with contextlib.suppress(OSError, AttributeError):  # Linux only; a smaller pipe still works
            import fcntl

            fcntl.fcntl(self._out.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)

    def next(self) -> Frame | None:
        """The next frame, or None once the child delivered the whole log; FrontLost if it stopped short."""
        head = self._read(_HEAD.size)
        flags, size, lines, consumed, *counts = _HEAD.unpack(head)
        if size > _MAX_FRAME or lines > size:
            raise FrontLost("the log reader process sent a broken frame")
        if flags & _DONE:
            return None
        lens = array("I")
        lens.frombytes(self._read(4 * lines))
        cut = CutLines(self._read(size), lens.tolist())
        self.consumed = consumed
        return Frame(cut, UnreadableBytes(*counts), consumed, bool(flags & _CARET))

    def _read(self, n: int) -> bytes:
        data = self._out.read(n) if n else b""
        if len(data) != n:
            raise FrontLost(f"the log reader process stopped (exit {self._proc.poll()})")
        return data

    def close(self) -> None:
        """Stop the child (our own, by its Popen handle) if it still runs, and reap it."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._out.close()
        self._proc.wait()


def _frame(cut: CutLines, unreadable: UnreadableBytes, consumed: int, flags: int) -> bytes:
    u = unreadable
    head = _HEAD.pack(
        flags, len(cut.clean), len(cut.lens), consumed, u.nul, u.invalid_utf8, u.controls, u.long_lines
    )
    return b"".join((head, array("I", cut.lens).tobytes(), cut.clean))


def _write_all(out: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(out, view) :]


def serve(fd: int, start: int, line_cap: int, caret_codes: bool, piece: int = PIECE, out: int = 1) -> None:
    """The child: cut the file from `start` to its end, a frame per piece that completed a line. A writer
    thread sends them (a write waits outside the interpreter), so the cut runs ahead of a parent busy with
    the previous frame, by at most AHEAD frames."""
    frames: queue.Queue[bytes | None] = queue.Queue(AHEAD)
    writer = threading.Thread(target=_drain, args=(frames, out), daemon=True)
    writer.start()
    try:
        _cut_file(fd, start, LineFront(line_cap, caret_codes=caret_codes), piece, frames)
    finally:
        frames.put(None)
        writer.join()


def _drain(frames: queue.Queue[bytes | None], out: int) -> None:
    """Send the frames; a parent gone (a broken pipe) ends this process at once, never leaving it blocked."""
    try:
        while (data := frames.get()) is not None:
            _write_all(out, data)
    except OSError:
        os._exit(1)


def _cut_file(fd: int, start: int, front: LineFront, piece_size: int, out: queue.Queue[bytes | None]) -> None:
    front.cr_only = False  # handed over only after a line feed was seen
    pos, said = start, UnreadableBytes()
    while piece := os.pread(fd, piece_size, pos):
        pos += len(piece)
        cut = front.feed(piece)
        if cut is not None:
            consumed = pos - len(piece) + piece.rfind(b"\n") + 1
            said = _send(out, front, cut, said, consumed)
    last = front.end()
    if last is not None:
        said = _send(out, front, last, said, pos)
    out.put(_HEAD.pack(_DONE, 0, 0, pos, 0, 0, 0, 0))


def _send(
    out: queue.Queue[bytes | None], front: LineFront, cut: CutLines, said: UnreadableBytes, consumed: int
) -> UnreadableBytes:
    """One frame; returns the unreadable counts said so far (each frame carries what is new)."""
    now = front.unreadable
    fresh = now - said
    out.put(_frame(cut, fresh, consumed, _CARET if front.caret_codes else 0))
    return now


def main(argv: list[str]) -> int:
    fd, start, line_cap, caret, piece = (int(a) for a in argv)
    try:
        serve(fd, start, line_cap, bool(caret), piece)
    except (OSError, ValueError):
        return 1  # the parent sees the stream end short and reads on itself
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
