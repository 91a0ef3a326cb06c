"""Typed errors whose message is one sentence an operator can act on.

Every error that can reach the CLI or the app derives from `ConsoleError`; the CLI prints
`str(err)` on one line and exits non-zero, never a traceback.
"""

from __future__ import annotations


class ConsoleError(Exception):
    """Base of every expected failure: bad input, unreachable service, refused action."""

    exit_code: int = 1


class SpecError(ConsoleError):
    """A preset, a --set override or a spec file is invalid."""


class RefusedError(ConsoleError):
    """An action was refused on purpose (read-only mode, error findings, a run already active)."""
