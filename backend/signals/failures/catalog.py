"""The failure catalog: every way a real run is known to die, as data (`configs/failures.toml`).

Adding a kind is a table in the TOML file and its tests; this module only checks that a table is
well-formed and compiles its patterns once.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.signals.failures.events import FailureEvent
from backend.signals.failures.stalls import NO_STALLS, StallRule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CASCADES = ("root", "symptom", "report")
DEFAULT_GROUP_BY = ("pid", "text")  # one process saying the same thing again counts once


class FailureCatalogError(ConsoleError):
    """The failure catalog is malformed."""


@dataclass(frozen=True, slots=True)
class KindPattern:
    """One way a kind's line reads: a regex searched in the line's message, and optionally its own message."""

    regex: re.Pattern[str]
    message: str | None = None


@dataclass(frozen=True, slots=True)
class FailureKind:
    id: str
    title: str
    cascade: str  # root | symptom | report
    hints: tuple[str, ...]
    patterns: tuple[KindPattern, ...]
    message: str
    tries: tuple[tuple[str, str], ...]  # (role or "default", what to try)
    yields_to: tuple[str, ...] = ()  # the better name for the same failure, seen for the same process
    yields_to_any: tuple[str, ...] = ()  # the same, seen for any process
    group_by: tuple[str, ...] = DEFAULT_GROUP_BY
    collect: tuple[str, ...] = ()
    needs_exception: bool = False
    actor_block: bool = False  # the line sits in ActorDiedError's field block, which names the dead actor
    elastic_block: bool = False  # the line ends torch elastic's root-cause table (host, rank, pid)
    relays: tuple[str, ...] = ()  # inner types whose error only relays another process's death
    memory_detail: bool = False  # Ray's OOM detail line under the line names the task killed and the node
    names_pid: bool = False  # the line names the failed process by its pid (torchrun's child, a shell's job)
    generic: bool = False  # any traceback's exception line that no other kind names
    derived: bool = False  # made by the scanner from other lines (a stall), never matched in one line
    # Ray reports it (a node, raylet or worker gone): the rollout in flight may still log on other ranks
    in_flight: bool = False
    examples: tuple[str, ...] = ()
    defaults: tuple[tuple[str, str], ...] = ()  # what a placeholder says when the line left its group out

    def what_to_try(self, role: str | None) -> str:
        by_role = dict(self.tries)
        return by_role.get(role or "", by_role.get("default", ""))


@dataclass(frozen=True, slots=True)
class FailureCatalog:
    kinds: tuple[FailureKind, ...]
    retried: tuple[str, ...]  # a line holding one of these is a caught, retried error
    succeeded: tuple[str, ...]  # how Ray says a job ended well
    stall: StallRule = NO_STALLS  # which phases stand still long enough to be a cause
    intended: tuple[str, ...] = ()  # a death whose reason holds one of these was the program's own doing

    def is_intended(self, event: FailureEvent) -> bool:
        reason = event.fields.get("reason", "")
        return any(word in reason for word in self.intended)

    def only_says_how(self, event: FailureEvent) -> bool:
        """An actor the program killed itself, or a caller's error that only relays another's death: how the
        run ended, never why (the report tier)."""
        inner = event.fields.get("inner", "").rsplit(".", 1)[-1]
        return self.is_intended(event) or (bool(inner) and inner in self.kind(event.kind).relays)

    def kind(self, kind_id: str) -> FailureKind:
        return next(k for k in self.kinds if k.id == kind_id)

    @property
    def specific(self) -> tuple[FailureKind, ...]:
        return tuple(k for k in self.kinds if not k.generic and not k.derived)

    @property
    def generic(self) -> FailureKind | None:
        return next((k for k in self.kinds if k.generic), None)

    def hints(self) -> tuple[str, ...]:
        """Every literal a failure line may hold (the cheap test that comes before any parsing)."""
        seen: dict[str, None] = {}
        for kind in self.kinds:
            for hint in kind.hints:
                seen.setdefault(hint, None)
        for hint in (*self.succeeded, *EXCEPTION_HINTS):
            seen.setdefault(hint, None)
        return tuple(seen)


# What an exception line at the end of a traceback holds (the generic kind's cheap test).
EXCEPTION_HINTS = ("Error", "Exception", "Interrupt")


def default_catalog_path() -> Path:
    return Path(str(resources.files("configs").joinpath("failures.toml")))


def _strings(raw: Fields, where: str, name: str) -> tuple[str, ...]:
    value = raw.value(name)
    value = () if value is None else value
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise FailureCatalogError(f"{where}: {name} must be a list of non-empty strings")
    return tuple(value)


def _text_map(raw: Fields, name: str, error: str) -> tuple[tuple[str, str], ...]:
    """A table of text (`try`, `defaults`) as pairs; absent is empty, anything else is `error`."""
    value = raw.value(name)
    value = {} if value is None else value
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise FailureCatalogError(error)
    return tuple(value.items())


def _pattern(raw: object, where: str) -> KindPattern:
    fields = Fields.of(raw)
    text, message = (raw, None) if isinstance(raw, str) else (fields.value("re"), fields.value("message"))
    if not isinstance(text, str) or not text or (message is not None and not isinstance(message, str)):
        raise FailureCatalogError(f"{where}: a pattern is a regex string or {{re = '…', message = '…'}}")
    try:
        return KindPattern(re.compile(text), message)
    except re.error as err:
        raise FailureCatalogError(f"{where}: bad pattern {text[:60]!r}: {err}") from None


def _kind(table: object, where: str) -> FailureKind:
    raw = _kind_table(table, where)
    cascade = raw.text("cascade")
    generic = raw.has("generic")
    derived = raw.has("derived")  # made by the scanner (a stall), not matched in a line
    patterns = tuple(_pattern(p, where) for p in raw.items("patterns"))
    hints = _strings(raw, where, "hints")
    if not generic and not derived and (not patterns or not hints):
        raise FailureCatalogError(f"{where}: a kind needs patterns and hints (literal text its lines hold)")
    tries = _text_map(raw, "try", f"{where}: try must map roles to text")
    group_by = _strings(raw, where, "group_by") if "group_by" in raw.raw else DEFAULT_GROUP_BY
    return FailureKind(
        id=raw.text("id"),
        title=raw.text("title"),
        cascade=cascade,
        hints=hints,
        patterns=patterns,
        message=raw.text("message"),
        tries=tries,
        yields_to=_strings(raw, where, "yields_to"),
        yields_to_any=_strings(raw, where, "yields_to_any"),
        group_by=group_by,
        collect=_strings(raw, where, "collect"),
        needs_exception=raw.has("needs_exception"),
        actor_block=raw.has("actor_block"),
        elastic_block=raw.has("elastic_block"),
        relays=_strings(raw, where, "relays"),
        memory_detail=raw.has("memory_detail"),
        names_pid=raw.has("names_pid"),
        generic=generic,
        derived=derived,
        in_flight=raw.has("in_flight"),
        examples=_strings(raw, where, "examples"),
        defaults=_text_map(raw, "defaults", f"{where}: defaults must map placeholders to text"),
    )


def _kind_table(table: object, where: str) -> Fields:
    """A kind's table with its id, title, message and a known cascade, else the error that says so."""
    if not isinstance(table, dict):
        raise FailureCatalogError(f"{where}: must be a table")
    raw = Fields(table)
    for name in ("id", "title", "message"):
        if not raw.string(name):
            raise FailureCatalogError(f"{where}: needs a {name}")
    if raw.text("cascade") not in CASCADES:
        raise FailureCatalogError(f"{where}: cascade must be one of {', '.join(CASCADES)}")
    return raw


def load_catalog(path: str | Path | None = None) -> FailureCatalog:
    """Parse and check the catalog; a bad file is one clear error."""
    path = Path(path) if path is not None else default_catalog_path()
    try:
        data = Fields(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise FailureCatalogError(f"cannot read the failure catalog {path}: {err}") from None
    kinds = _kinds(data, path)
    benign = data.obj("benign")
    return FailureCatalog(
        tuple(kinds),
        _strings(benign, f"[benign] in {path}", "retried"),
        _strings(benign, f"[benign] in {path}", "succeeded"),
        _stall_rule(data.obj("stall"), f"[stall] in {path}"),
        _strings(benign, f"[benign] in {path}", "intended"),
    )


def _kinds(data: Fields, path: Path) -> list[FailureKind]:
    """Every kind of the file: unique ids, yielding only to kinds it defines, at most one generic."""
    kinds, seen = [], set()
    for i, raw in enumerate(data.items("kind")):
        kind = _kind(raw, f"failure kind #{i + 1} ({Fields.of(raw).text('id', 'no id')}) in {path}")
        if kind.id in seen:
            raise FailureCatalogError(f"failure kind {kind.id!r} in {path} is defined twice")
        seen.add(kind.id)
        kinds.append(kind)
    for kind in kinds:
        unknown = [y for y in (*kind.yields_to, *kind.yields_to_any) if y not in seen]
        if unknown:
            raise FailureCatalogError(
                f"failure kind {kind.id!r} in {path} yields to unknown kinds: {', '.join(unknown)}"
            )
    if sum(k.generic for k in kinds) > 1:
        raise FailureCatalogError(f"{path}: at most one generic kind")
    return kinds


def _stall_rule(raw: Fields, where: str) -> StallRule:
    min_s = raw.value("min_s")
    min_s = 300 if min_s is None else min_s
    if not isinstance(min_s, int | float) or isinstance(min_s, bool) or min_s <= 0:
        raise FailureCatalogError(f"{where}: min_s must be a positive number of seconds")
    at_end = raw.value("at_end")
    if at_end is not None and not isinstance(at_end, str):
        raise FailureCatalogError(f"{where}: at_end must be a message")
    return StallRule(_strings(raw, where, "phases"), float(min_s), at_end)


_DEFAULT: FailureCatalog | None = None


def default_catalog() -> FailureCatalog:
    """The shipped catalog, read once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_catalog()
    return _DEFAULT
