"""What a run was launched with, as flags, and the flags two runs differ in.

Three places say it: the entrypoint argv (our own audit log's launch command, or Ray's job record of anyone's
job), and Megatron's argument dump at the top of the log (`  rollout_batch_size ........ 32`, every argument
with its value, defaults included). A dump name is spelt as its flag (`--rollout-batch-size`), so a dump
compares with an argv; since a dump holds defaults an argv leaves out, a mixed pair compares only the flags
both name.

A secret never leaves this module: the value of a flag or variable whose name looks secret (key, token,
password...) is kept only as a digest, for telling "changed" from "same", and shown as ***; every other value
is redacted (remembered secrets, URL passwords, Bearer tokens) and made one clean line (backend.redaction).
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from backend.argv_tokens import flag_groups
from backend.redaction import SECRET_NAME, shown_value
from backend.sanitize import one_line

FlagSource = Literal["argv", "audit", "args-dump"]
BOOL_FLAG = "True"  # a bare `--use-kl-loss` is what the dump prints as `use_kl_loss ... True`
# `  name ....... value` (Megatron's print_args), behind a Ray prefix or none. Blanks, not `\s`: `\s+` ran
# over line breaks, so k blank lines before a line that is no argument cost k^2 steps (40k lines: 25 s).
_DUMP_LINE = re.compile(r"^(?:\([^)\n]*\) ?)?[ \t]+([A-Za-z_][A-Za-z0-9_]*) \.{3,} ?([^\n]*)$", re.MULTILINE)
_DUMP_HINT = " arguments ---"
_DUMP_START = re.compile(r"-{3,} arguments -{3,}")
_DUMP_END = "end of arguments"
DUMP_SPAN = 2000  # lines a dump without its end line is read over
_ENV_PAIR = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)


@dataclass(frozen=True)
class FlagValue:
    """One flag's value: `shown` is fit for any screen or file; `same_as` is what equality is judged on (the
    number it spells, the text, or a digest of a secret)."""

    shown: str
    same_as: str


@dataclass(frozen=True)
class LaunchFlags:
    """The flags of one run (`--name` -> value; `NAME` for
    an environment variable set on the command line)."""

    source: FlagSource
    flags: Mapping[str, FlagValue]

    def __len__(self) -> int:
        return len(self.flags)


@dataclass(frozen=True)
class FlagChange:
    """A flag the two runs differ in; None where a run does not name it."""

    flag: str
    before: str | None
    after: str | None

    def text(self) -> str:
        return f"{self.flag} {_side(self.before)} → {_side(self.after)}"

    def to_json(self) -> dict[str, Any]:
        return {"flag": self.flag, "before": self.before, "after": self.after}


@dataclass(frozen=True)
class FlagDiff:
    """What changed from the baseline (`before`) to the run (`after`): only the flags that differ.
    `uncompared` counts flags only one side could say (a mixed argv / dump pair)."""

    before_source: FlagSource
    after_source: FlagSource
    changes: tuple[FlagChange, ...]
    uncompared: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "before_source": self.before_source,
            "after_source": self.after_source,
            "changes": [c.to_json() for c in self.changes],
            "uncompared": self.uncompared,
        }


def _side(value: str | None) -> str:
    return "(unset)" if value is None else value or "''"


def _normal(value: str) -> str:
    """Equal numbers spelt differently (`1e-6`, `1e-06`, `32`, `32.0`) compare equal."""
    try:
        number = float(value)
    except ValueError:
        return value
    return repr(number) if math.isfinite(number) else value


def flag_value(name: str, raw: str) -> FlagValue:
    if SECRET_NAME.search(name):
        return FlagValue(shown_value(name, raw), "sha256:" + hashlib.sha256(raw.encode()).hexdigest())
    return FlagValue(shown_value(name, raw), _normal(raw))


def _flags(pairs: Iterable[tuple[str, str]], source: FlagSource) -> LaunchFlags:
    return LaunchFlags(
        source, MappingProxyType({one_line(name): flag_value(name, raw) for name, raw in pairs})
    )


def _tokens(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def argv_pairs(tokens: list[str]) -> list[tuple[str, str]]:
    """(name, value) of a command's flags: `--a v`, `--a=v`, `--a v1 v2` (nargs), a bare `--a` (True), and
    `NAME=value` environment assignments before the program."""
    pairs: list[tuple[str, str]] = []
    script = next((i for i, t in enumerate(tokens) if t.endswith(".py")), None)
    for tok in tokens[: script if script is not None else 0]:
        env = _ENV_PAIR.match(tok)
        if env is not None:
            pairs.append((env.group(1), env.group(2)))
    rest = tokens[script + 1 :] if script is not None else tokens
    pairs += [(name, " ".join(values) if values else BOOL_FLAG) for name, values in flag_groups(rest)]
    return pairs


def flags_from_command(command: str, source: FlagSource = "argv") -> LaunchFlags | None:
    """The flags of an entrypoint (`python3 .../train.py --a 1 ...`) or of our audit log's launch line
    (`ray job submit ... -- python3 train.py ...`); None when it names no flag."""
    pairs = argv_pairs(_tokens(command))
    return _flags(pairs, source) if pairs else None


def dump_flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


class ArgumentDump:
    """Megatron's argument dump in a log, collected as lines arrive (a `LogStore.subscribe` listener): the
    lines between `---- arguments ----` and `---- end of arguments ----` (or the next `DUMP_SPAN` lines when
    the end never comes). Only the first dump counts (a restart prints another)."""

    def __init__(self) -> None:
        self._pairs: dict[str, str] = {}
        self._until: int | None = None  # the line the dump is over by, once its start was seen
        self._closed = False

    def on_lines(self, first: int, count: int, text: str, *, bounded: bool = True) -> None:
        """Only the dump's span of a chunk is read (a replay's 4 MB chunks hold it in their first 2,000
        lines: reading the rest cost a regex pass over the whole chunk); `bounded=False`: all of it (a
        whole log given at once, as before)."""
        if self._closed:
            return
        end_line = first + count
        if self._until is None:
            start = _DUMP_START.search(text) if _DUMP_HINT in text else None
            if start is None:
                return
            first += text.count("\n", 0, start.start())
            self._until = first + DUMP_SPAN
            text = text[start.end() :]
        if bounded:
            text = _head_lines(text, self._until - first)
        end = text.find(_DUMP_END)
        for m in _DUMP_LINE.finditer(text if end < 0 else text[:end]):
            self._pairs.setdefault(dump_flag_name(m.group(1)), m.group(2).rstrip("\r"))
        if end >= 0 or end_line >= self._until:
            self._closed = True

    def feed(self, text: str) -> None:
        """A whole log text at once (the CLI's saved log)."""
        self.on_lines(0, text.count("\n"), text, bounded=False)

    def flags(self) -> LaunchFlags | None:
        return _flags(self._pairs.items(), "args-dump") if self._pairs else None


def _head_lines(text: str, lines: int) -> str:
    """The text's first `lines` lines (line ends kept), or all of it when it has no more."""
    pos = -1
    for _ in range(max(lines, 0)):
        pos = text.find("\n", pos + 1)
        if pos < 0:
            return text
    return text[: pos + 1]


def diff_flags(before: LaunchFlags | None, after: LaunchFlags | None) -> FlagDiff | None:
    """The flags `after` differs from `before` in (sorted by name); None unless both are known."""
    if before is None or after is None:
        return None
    mixed = (before.source == "args-dump") != (after.source == "args-dump")
    names = set(before.flags) | set(after.flags)
    shared = set(before.flags) & set(after.flags)
    changes = (
        _change(name, before.flags.get(name), after.flags.get(name))
        for name in sorted(shared if mixed else names)
    )
    return FlagDiff(
        before.source,
        after.source,
        tuple(c for c in changes if c is not None),
        len(names - shared) if mixed else 0,
    )


def _change(name: str, a: FlagValue | None, b: FlagValue | None) -> FlagChange | None:
    """How a flag changed (its value before and after, None where absent); None where it did not."""
    if a is not None and b is not None and a.same_as == b.same_as:
        return None
    return FlagChange(name, a.shown if a else None, b.shown if b else None)
