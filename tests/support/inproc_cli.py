"""`ultra-console ARGS` run inside the test's own process, for tests whose subject is what a command says
(exit status, one stderr line, no traceback), not the process boundary: a CLI subprocess costs a Python
start and the console's imports (~0.5-1 CPU-s) per call. The tests where the boundary is the subject (a
shell's exit code, a signal, a real stderr) keep `subprocess`.

It answers as `subprocess.run(..., capture_output=True, text=True, stdin=DEVNULL)` does: a CompletedProcess
with the exit status (argparse's SystemExit included), stdout and stderr. The environment is the one given
(else this process's) for the call only, stdin is empty and not a TTY, and the redaction module's
remembered secrets start empty and are put back after: a secret one call remembered never hides what a
later call leaks.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence

from backend import redaction
from console.cli import main


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _fresh_secrets() -> Iterator[None]:
    saved = set(redaction._known)
    redaction._known.clear()
    try:
        yield
    finally:
        redaction._known.clear()
        redaction._known.update(saved)


def _status(code: object) -> int:
    """A SystemExit's code as a process's exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what the interpreter does with `sys.exit("text")`
    return 1


def run_cli(args: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ultra-console ARGS` in this process: (exit status, stdout, stderr) as a CompletedProcess."""
    out, err = io.StringIO(), io.StringIO()
    with (
        _environment(env),
        _fresh_secrets(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        saved_stdin, sys.stdin = sys.stdin, io.StringIO("")
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = _status(exit_.code)
        finally:
            sys.stdin = saved_stdin
    return subprocess.CompletedProcess(["ultra-console", *args], code, out.getvalue(), err.getvalue())
