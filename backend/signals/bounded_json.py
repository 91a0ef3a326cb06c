"""JSON from a run's lines and files, read within limits: size, nesting depth, item count, integer digits.

Why: a run writes these (the shim's line, `{dump_details}` JSONL, the dashboard's meta.json) and the console
must survive whatever they hold. Python's json raises `RecursionError` on a few thousand nested brackets and
`ValueError` on a 5000-digit integer (and a 400-digit one overflows `float()` later); a line with a million
keys costs memory without bound. Every such value becomes one `JsonLimitError` (a `ValueError`), which a
reader counts as an unreadable line with a sample: never a crash.

The checks are C-speed (`str.count`, a regex) on the common path; only a line that trips a cheap upper bound
is looked at closely (strings blanked, brackets peeled
one level per pass), so normal lines pay almost nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """How much one JSON text may hold."""

    max_chars: int
    max_depth: int  # nested arrays/objects
    max_items: int  # keys and array items over the whole value
    max_digits: int  # digits in one run (an integer beyond this is no metric)


# One `{dump_details}` JSONL line or meta.json: a metric event holds a few hundred keys.
DUMP_LINE = JsonLimits(max_chars=1 << 20, max_depth=32, max_items=20_000, max_digits=40)
# The shim's line: a flat dict of about fifteen provider fields.
SHIM_LINE = JsonLimits(max_chars=8192, max_depth=4, max_items=256, max_digits=40)


class JsonLimitError(ValueError):
    """The text is not JSON within the limits (too big,
    too deep, too many items, a huge number, malformed)."""


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_INNERMOST = re.compile(r"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")


def _blank_strings(text: str) -> str:
    """The text with every string literal emptied, so
    brackets, commas and digits inside strings do not count."""
    return _STRING.sub('""', text)


def _depth_over(text: str, limit: int) -> bool:
    """True if arrays/objects nest deeper than `limit` (peels the innermost level once per pass, C-speed)."""
    for _ in range(limit):
        text, peeled = _INNERMOST.subn("0", text)
        if not peeled:
            return False
    return "[" in text or "{" in text


def check(text: str, limits: JsonLimits) -> None:
    """Raise JsonLimitError if `text` exceeds `limits` (it may still be malformed JSON)."""
    if len(text) > limits.max_chars:
        raise JsonLimitError(f"{len(text)} characters, over the limit of {limits.max_chars}")
    opens = text.count("[") + text.count("{")
    blanked: str | None = None
    if opens > limits.max_depth:
        blanked = _blank_strings(text)
        if _depth_over(blanked, limits.max_depth):
            raise JsonLimitError(f"nested deeper than {limits.max_depth} levels")
    if text.count(",") + opens > limits.max_items:
        blanked = blanked if blanked is not None else _blank_strings(text)
        items = blanked.count(",") + blanked.count("[") + blanked.count("{")
        if items > limits.max_items:
            raise JsonLimitError(f"about {items} items, over the limit of {limits.max_items}")
    long_run = re.compile(r"\d{" + str(limits.max_digits + 1) + "}")
    if long_run.search(text) is not None:
        blanked = blanked if blanked is not None else _blank_strings(text)
        if long_run.search(blanked) is not None:
            raise JsonLimitError(f"a number of more than {limits.max_digits} digits")


def loads(text: str | bytes, limits: JsonLimits) -> Any:
    """`json.loads` within `limits`; every failure (limits, bad UTF-8, bad JSON) is a JsonLimitError."""
    if isinstance(text, bytes | bytearray):
        if len(text) > 4 * limits.max_chars:
            raise JsonLimitError(f"{len(text)} bytes, over the limit of {limits.max_chars} characters")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise JsonLimitError("not UTF-8") from None
    check(text, limits)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:  # JSONDecodeError is a ValueError
        raise JsonLimitError(f"not JSON: {str(err)[:120]}") from None
