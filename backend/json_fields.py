"""Typed reading of decoded JSON (Ray's answers, a node job's result lines, NVML's dicts), once, at the edge.

Why one reader: Ray's payloads miss fields, send null, send numbers as text, and a node job's line can be cut;
every parser used to repeat `str(raw[k] or "")`-style and `int(float(...))` guards on untyped dicts. `Fields`
holds those rules in one place: a parser asks for the type it wants (`f.text("name")`, `f.integer("pid")`) and
gets it, whatever arrived, then builds its frozen dataclass; nothing past the parser touches the dict.

Stdlib only: the node jobs inline it (`# inlined on the node`, see backend.cluster.node_job).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


def as_int(value: object, default: int = 0) -> int:
    """`value` as an int (a float or numeric text is truncated); `default` when it is none of those."""
    if isinstance(value, int):
        return int(value)  # a bool too, as int(float(True)) always gave
    if not isinstance(value, (float, str)):
        return default
    try:
        return int(float(value))
    except (ValueError, OverflowError):
        return default


def objects(value: object) -> list[Fields]:
    """`value`'s objects when it is a list (its other items skipped), else []."""
    return [Fields(item) for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


@dataclass(frozen=True)
class Fields:
    """One decoded JSON object, read by typed accessors; a missing, null or odd field reads as the default."""

    raw: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, value: object) -> Fields:
        """`value` if it is a JSON object, else an empty one (every field then reads as missing)."""
        return cls(value) if isinstance(value, Mapping) else cls()

    def value(self, key: str) -> object:
        """The field as decoded (None when missing), for a caller that checks its type itself."""
        return self.raw.get(key)

    def has(self, key: str) -> bool:
        """The field is there and truthy (not missing, null, 0 or empty)."""
        return bool(self.value(key))

    def text(self, key: str, default: str = "") -> str:
        """The field as text; `default` when it is missing, null, 0 or empty."""
        value = self.value(key)
        return str(value) if value else default

    def string(self, key: str) -> str | None:
        """The field when it is a string (empty too), else None: for a file whose author must write text."""
        value = self.value(key)
        return value if isinstance(value, str) else None

    def optional_text(self, key: str) -> str | None:
        """The field as text; None when it is missing, null, 0 or empty."""
        value = self.value(key)
        return str(value) if value else None

    def integer(self, key: str, default: int = 0) -> int:
        """The field as an int (a float or numeric text is truncated); `default` when it is not a number."""
        return as_int(self.value(key), default)

    def real(self, key: str, default: float = 0.0) -> float:
        """The field as a float; `default` when it is missing, 0 or not a number."""
        value = self.value(key)
        if not value or not isinstance(value, (int, float, str)):
            return default
        try:
            return float(value)
        except ValueError:
            return default

    def number(self, key: str) -> float | None:
        """The field when it is a JSON number (never a bool or text), else None."""
        value = self.value(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def reading(self, key: str) -> float:
        """The field when it is a JSON number (never a bool or text), else nan: a sample with a gap."""
        number = self.number(key)
        return math.nan if number is None else number

    def whole(self, key: str) -> int | None:
        """The field when it is a JSON integer (never a bool, a float or text), else None."""
        value = self.value(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def obj(self, key: str) -> Fields:
        """The field as an object (an empty one when it is not)."""
        return Fields.of(self.value(key))

    def objs(self, key: str) -> list[Fields]:
        """The field's objects when it is a list (its other items skipped), else []."""
        return objects(self.value(key))

    def items(self, key: str) -> list[object]:
        """The field's items when it is a list, else []."""
        value = self.value(key)
        return list(value) if isinstance(value, (list, tuple)) else []
