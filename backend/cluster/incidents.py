"""A run's incident ledger on the head: what its watcher saw, for whoever looks later.

One JSON object per line in `<ledger dir>/incidents.jsonl`: every alert raised and cleared, every incident
(a failure the catalog names) and the cause of death, with the time, the message and the line that said
it. Written safely: one `write` per line to a file opened `O_APPEND | O_NOFOLLOW` (0600), fsynced, so a
watcher killed with SIGKILL loses at most the line it was writing, and a torn last line is skipped on read
and closed before the next append. Each entry has a `key` that a replay of the same log makes again: a
restarted watcher (which re-reads the run's log from its start) writes only what the ledger lacks.
Bounded: past `MAX_BYTES` the file becomes `incidents.1.jsonl` (one older generation kept, both read).

"Since you last looked" is per operator: `seen/<user>.json` holds how many entries that user has seen; an
attaching console (the app, `status`) shows the entries after it, then moves it.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from backend.json_fields import Fields
from backend.redaction import public_line
from backend.safe_paths import PrivateDir, UnsafePath, lexically_inside, open_private, read_private_tail
from backend.safe_paths import safe_name as bounded_name

LEDGER = "incidents.jsonl"
# the run's watcher keeps these beside the ledger (backend.cluster.watcher_job, backend.cluster.watcher)
WATCHER_LOCK = "watcher.lock"  # held (flock) while a watcher runs: one per run
WATCHER_CONFIG = "watcher-config.json"  # its settings (0600, secrets included), removed once the run ended
OLDER = "incidents.1.jsonl"
MAX_BYTES = 4 << 20
MAX_LINE = 8192
MESSAGE_CHARS = 1000
LINE_CHARS = 400
EntryKind = Literal["fire", "clear", "incident", "cause", "end", "watcher", "notify-failed"]
SHOWN_KINDS: tuple[EntryKind, ...] = ("fire", "clear", "incident", "cause", "end", "notify-failed")


@dataclass(frozen=True)
class Entry:
    """One thing that happened to the run."""

    kind: EntryKind
    key: str  # stable across a replay of the same log: the dedup id
    t: float = field(default_factory=time.time)
    alert: str = ""
    severity: str = ""
    message: str = ""
    line: str = ""
    step: float | None = None
    try_: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["try"] = data.pop("try_")
        return data

    @classmethod
    def of(cls, obj: Any) -> Entry | None:
        f = Fields.of(obj)
        kind, key = f.text("kind"), f.text("key")
        if kind not in EntryKind.__args__ or not key:  # type: ignore[attr-defined]
            return None
        step = f.value("step")
        return cls(
            kind,  # type: ignore[arg-type]
            key,
            float(t) if isinstance(t := f.value("t"), (int, float)) else 0.0,
            f.text("alert"),
            f.text("severity"),
            f.text("message"),
            f.text("line"),
            float(step) if isinstance(step, (int, float)) else None,
            f.text("try"),
        )

    def summary(self) -> str:
        """One line as `status` and the app print it."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.t))
        what = {
            "fire": f"{self.severity} {self.alert} raised",
            "clear": f"{self.alert} cleared",
            "incident": f"incident {self.alert}",
            "cause": f"cause of death: {self.alert}",
            "end": "run ended",
            "watcher": "watcher",
            "notify-failed": "notification failed",
        }[self.kind]
        text = f"{when}  {what}: {self.message}" if self.message else f"{when}  {what}"
        return text + (f" — try: {self.try_}" if self.try_ else "")


def clean(entry: Entry) -> Entry:
    """The entry fit for a file: redacted, one line each, bounded."""
    return Entry(
        entry.kind,
        public_line(entry.key)[:300],
        entry.t,
        public_line(entry.alert)[:100],
        entry.severity,
        public_line(entry.message)[:MESSAGE_CHARS],
        public_line(entry.line)[:LINE_CHARS],
        entry.step,
        public_line(entry.try_)[:MESSAGE_CHARS],
    )


SEEN_LIMIT = 16 << 20  # an operator's seen keys: a bounded ledger's keys fit many times over


def safe_name(job_id: str, limit: int = 96) -> str:
    """A job id as one directory name: a Ray id (`[A-Za-z0-9_-]`) as it is; any other (a control
    character, CJK, 300 characters) bounded ASCII with a digest: two ids never share one ledger."""
    return bounded_name(job_id or "job", limit=limit)


def ledger_dir(root: Path, job_id: str) -> Path:
    """`<root>/runs/<job>`: proven inside `root` by name (backend.safe_paths)."""
    try:
        return Path(lexically_inside(str(root / "runs"), safe_name(job_id)))
    except UnsafePath:  # pragma: no cover - safe_name leaves nothing it refuses
        return root / "runs" / "job"


def _read(directory: Path, name: str) -> Iterator[Entry]:
    """The entries of one ledger file, opened as safe_paths opens (a link, a FIFO, a device or a foreign
    directory is no ledger: nothing, never a hang); a line is read at most MAX_LINE bytes at a time."""
    try:
        fd = open_private(directory, name, os.O_RDONLY, create=False)
    except (OSError, UnsafePath):
        return
    with os.fdopen(fd, "rb") as handle:
        for raw in _bounded_lines(handle):
            try:
                entry = Entry.of(json.loads(raw))
            except (ValueError, RecursionError):
                continue
            if entry is not None:
                yield entry


def _bounded_lines(handle: IO[bytes]) -> Iterator[bytes]:
    """Complete lines of at most MAX_LINE bytes: an oversized one is skipped piece by piece (never held
    whole), a torn last line (the writer was killed mid-line) is left out."""
    skipping = False
    for raw in iter(lambda: handle.readline(MAX_LINE + 1), b""):
        whole = raw.endswith(b"\n")
        if not skipping and whole:
            yield raw
        skipping = not whole


class Ledger:
    """The ledger of one run; `add` writes an entry unless one with its key is there already."""

    def __init__(self, directory: Path, max_bytes: int = MAX_BYTES) -> None:
        self.dir = directory
        self.max_bytes = max_bytes
        self.path = directory / LEDGER
        self.keys: set[str] = {e.key for e in self.entries()}

    def entries(self) -> list[Entry]:
        return [*_read(self.dir, OLDER), *_read(self.dir, LEDGER)]

    def add(self, entry: Entry) -> bool:
        """Append `entry` (cleaned) unless its key is known; True when written."""
        entry = clean(entry)
        if entry.key in self.keys:
            return False
        line = json.dumps(entry.to_json(), separators=(",", ":"), allow_nan=False).encode()
        folder = PrivateDir(self.dir)  # created 0700, this user's own: never another's or a link
        try:
            self._rotate(folder)
            fd = folder.open(LEDGER, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                if _torn(fd):
                    os.write(fd, b"\n")
                os.write(fd, line + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            folder.close()
        self.keys.add(entry.key)
        return True

    def _rotate(self, folder: PrivateDir) -> None:
        with contextlib.suppress(OSError):
            if os.stat(LEDGER, dir_fd=folder.fd, follow_symlinks=False).st_size >= self.max_bytes:
                os.replace(LEDGER, OLDER, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)


def _torn(fd: int) -> bool:
    """Whether the file ends without a newline (a line cut short by a kill)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def operator() -> str:
    """Who looks: the login name (one file per operator)."""
    with contextlib.suppress(Exception):
        return safe_name(getpass.getuser())
    return "operator"


def _seen_path(directory: Path, user: str) -> Path:
    return directory / "seen" / f"{safe_name(user)}.json"


def since_last_looked(directory: Path, user: str | None = None, *, mark: bool = True) -> list[Entry]:
    """The entries `user` has not seen (every one at a first look), and, with `mark`, now seen."""
    user = user or operator()
    entries = [e for e in Ledger(directory).entries() if e.kind in SHOWN_KINDS]
    seen_path = _seen_path(directory, user)
    seen = _read_seen(seen_path)
    new = [e for e in entries if e.key not in seen]
    if mark and new:
        _write_seen(seen_path, seen | {e.key for e in new})
    return new


def _read_seen(path: Path) -> set[str]:
    """The keys a user has seen; none when the file is missing or unreadable (a first look)."""
    with contextlib.suppress(OSError, ValueError, UnsafePath, RecursionError):
        data, cut = read_private_tail(path.parent, path.name, SEEN_LIMIT)  # no link, FIFO or /dev/zero
        raw = Fields.of(json.loads(data) if not cut else {}).items("keys")
        return {k for k in raw if isinstance(k, str)}
    return set()


def _write_seen(path: Path, keys: set[str]) -> None:
    """Replace the seen keys atomically; a failed write only means they show again next time."""
    with contextlib.suppress(OSError, UnsafePath):
        folder = PrivateDir(path.parent)  # O_NOFOLLOW, relative to a directory of this user's own
        try:
            folder.replace(path.name, json.dumps({"keys": sorted(keys)}).encode())
        finally:
            folder.close()


def since_lines(entries: list[Entry], limit: int = 20) -> list[str]:
    """'since you last looked' in lines (the newest `limit`; a count of the rest)."""
    if not entries:
        return []
    shown = entries[-limit:]
    head = [f"since you last looked: {len(entries)} change(s)"]
    if len(entries) > len(shown):
        head.append(f"  … {len(entries) - len(shown)} earlier")
    return head + [f"  {e.summary()}" for e in shown]
