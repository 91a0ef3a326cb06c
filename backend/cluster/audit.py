"""Append-only audit log of every action that changes the cluster (launch, abort, cleanup).

One JSON object per line in `<state_dir>/audit.jsonl`: time (UTC ISO-8601), user, action, job,
command (already redacted by the caller, and scrubbed again here), result, details. Why a plain
JSON-lines file: it survives the console being killed mid-write (one `write` per line, opened in
append mode), `jq` reads it, and the app's events view re-reads it cheaply. The file is created
0600 in a 0700 directory: commands carry paths and run ids an operator may not want to share. It is opened
through backend/safe_paths.py's rule (O_NOFOLLOW in a directory of this user's own, a regular file only):
a FIFO, a device or a link at its path is one line, never a hang or a read without end; only its last
READ_CAP bytes are ever read. Lines are written ASCII-only (json's \\u escapes): a job id or node name with
control characters or bidi overrides is kept exact as data and never reaches the file raw.
"""

from __future__ import annotations

import getpass
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from backend.errors import ConsoleError
from backend.plan.submission import REDACTED, SECRET_ENV, redact
from backend.redaction import public_text
from backend.safe_paths import UnsafePath, open_private, read_private_tail

AUDIT_FILE = "audit.jsonl"
READ_CAP = 8 << 20  # the newest 8 MiB of the log: ~30k entries, far more than any reader asks for
# `--token X`, `Authorization: Bearer X`, `KEY=value` pairs whose name looks secret.
_BEARER = re.compile(r"(Bearer\s+)\S+", re.IGNORECASE)
_TOKEN_FLAG = re.compile(r"(--(?:token|wandb-key)[ =])\S+")
_SECRET_PAIR = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=(\S+)")


class AuditError(ConsoleError):
    """The audit log could not be written (the action it describes is refused or reported)."""


def scrub(text: str, secrets: dict[str, str] | None = None) -> str:
    """Last line of defence: no token, key or secret-named value reaches the audit file."""
    text = public_text(redact(text, secrets))  # also the session's remembered secrets; no escape sequence
    text = _BEARER.sub(rf"\1{REDACTED}", text)
    text = _TOKEN_FLAG.sub(rf"\1{REDACTED}", text)
    return _SECRET_PAIR.sub(
        lambda m: f"{m.group(1)}={REDACTED}" if SECRET_ENV.search(m.group(1)) else m.group(0), text
    )


def _scrub_obj(value: Any, secrets: dict[str, str] | None) -> Any:
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and SECRET_ENV.search(k) else _scrub_obj(v, secrets))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_scrub_obj(v, secrets) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One line of the audit log, as `record` wrote it (command and result already scrubbed)."""

    time: str  # UTC ISO-8601
    user: str
    action: str
    job: str | None
    command: str
    result: str
    details: Mapping[str, Any] = field(default_factory=dict)  # the action's JSON object (e.g. a footprint)

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "user": self.user,
            "action": self.action,
            "job": self.job,
            "command": self.command,
            "result": self.result,
            "details": dict(self.details),
        }


class BadAuditLine(ValueError):
    """A line of the audit file that is no entry; its message is the one-line reason."""


_TEXT_FIELDS = ("time", "user", "action", "command", "result")


def parse_entry(line: str) -> AuditEntry:
    """The entry one line holds; BadAuditLine (one line, why) for a torn, foreign or hand-edited line."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        raise BadAuditLine("not JSON (a write cut short?)") from None
    if not isinstance(data, dict):
        raise BadAuditLine("not a JSON object")
    wrong = [k for k in _TEXT_FIELDS if not isinstance(data.get(k), str)]
    job, details = data.get("job"), data.get("details", {})
    if job is not None and not isinstance(job, str):
        wrong.append("job")
    if not isinstance(details, dict):
        wrong.append("details")
    if wrong:
        raise BadAuditLine(f"no text in {', '.join(wrong)}")
    return AuditEntry(
        data["time"], data["user"], data["action"], job, data["command"], data["result"], details
    )


@dataclass(frozen=True, slots=True)
class AuditRead:
    """The entries read back, oldest first, and a one-line note on the lines skipped ("" when none)."""

    entries: tuple[AuditEntry, ...]
    note: str = ""


def last_launch_command(entries: Iterable[AuditEntry], job_id: str) -> str:
    """The (scrubbed) command of `job_id`'s last launch, or "" when this log never launched it."""
    return next((e.command for e in reversed(list(entries)) if e.action == "launch" and e.job == job_id), "")


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return str(os.getuid())


def _parse_lines(lines: list[str], first: int) -> tuple[list[AuditEntry], list[str]]:
    """The entries, and each unreadable line named by its number (blank lines are no entry)."""
    out: list[AuditEntry] = []
    bad: list[str] = []
    for number, line in enumerate(lines, start=first):
        if not line.strip():
            continue
        try:
            out.append(parse_entry(line))
        except BadAuditLine as err:
            bad.append(f"line {number}: {err}")
    return out, bad


class AuditLog:
    """`AuditLog(settings.state_dir).record("launch", job=..., command=..., result="submitted")`."""

    def __init__(self, state_dir: Path | str) -> None:
        self.path = Path(state_dir).expanduser() / AUDIT_FILE

    def record(
        self,
        action: str,
        *,
        job: str | None,
        command: str = "",
        result: str,
        details: dict[str, Any] | None = None,
        secrets: dict[str, str] | None = None,
        user: str | None = None,
    ) -> AuditEntry:
        entry = AuditEntry(
            datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            user or current_user(),
            action,
            job,
            scrub(command, secrets),
            scrub(result, secrets),
            _scrub_obj(details or {}, secrets),
        )
        line = json.dumps(entry.to_json(), ensure_ascii=True, separators=(",", ":")) + "\n"
        try:
            fd = open_private(self.path.parent, AUDIT_FILE, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = "\n" + line  # a writer died mid-line: start ours on a fresh line
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except UnsafePath as err:
            raise AuditError(f"cannot write the audit log: {err}") from None
        except OSError as err:
            raise AuditError(f"cannot write the audit log {self.path}: {err.strerror or err}") from None
        return entry

    def entries(self, limit: int | None = None) -> tuple[AuditEntry, ...]:
        """Entries oldest first (the last `limit` lines' if given); lines that are no entry are skipped."""
        return self.read(limit).entries

    def read(self, limit: int | None = None) -> AuditRead:
        """`entries` and a one-line note naming the lines skipped (a torn write, a hand edit)."""
        try:
            data, cut = read_private_tail(self.path.parent, AUDIT_FILE, READ_CAP)
        except FileNotFoundError:
            return AuditRead(())
        except UnsafePath as err:
            raise AuditError(f"cannot read the audit log: {err}") from None
        except OSError as err:
            raise AuditError(f"cannot read the audit log {self.path}: {err.strerror or err}") from None
        lines = data.decode("utf-8", errors="replace").splitlines()[1 if cut else 0 :]  # a cut first line
        first = max(0, len(lines) - limit) if limit else 0
        out, bad = _parse_lines(lines[first:], first + 1)
        note = ""
        if bad:
            more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
            note = f"{len(bad)} unreadable line(s) of {self.path.name} skipped: {bad[0]}{more}"
        return AuditRead(tuple(out), note)
