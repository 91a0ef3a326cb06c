"""Append-only audit log of every action that changes the cluster (launch, abort, cleanup).

One JSON object per line in `<state_dir>/audit.jsonl`: time (UTC ISO-8601), user, action, job,
command (already redacted by the caller, and scrubbed again here), result, details. Why a plain
JSON-lines file: it survives the console being killed mid-write (one `write` per line, opened in
append mode), `jq` reads it, and the app's events view re-reads it cheaply. The file is created
0600 in a 0700 directory: commands carry paths and run ids an operator may not want to share.
"""

from __future__ import annotations

import getpass
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from backend.errors import ConsoleError
from backend.plan.submission import REDACTED, SECRET_ENV, redact
from backend.redaction import public_text

AUDIT_FILE = "audit.jsonl"
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


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return str(os.getuid())


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
    ) -> dict[str, Any]:
        entry = {
            "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "user": user or current_user(),
            "action": action,
            "job": job,
            "command": scrub(command, secrets),
            "result": scrub(result, secrets),
            "details": _scrub_obj(details or {}, secrets),
        }
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = "\n" + line  # a writer died mid-line: start ours on a fresh line
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError as err:
            raise AuditError(f"cannot write the audit log {self.path}: {err.strerror or err}") from None
        return entry

    def entries(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Entries oldest first (the last `limit` if given); a torn last line is skipped."""
        try:
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return []
        except OSError as err:
            raise AuditError(f"cannot read the audit log {self.path}: {err.strerror or err}") from None
        out = []
        for line in lines[-limit:] if limit else lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
        return out
