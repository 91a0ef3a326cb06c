"""TOML from the operator (config file, preset, `--set` value) parsed with bounds: nesting deeper than
MAX_DEPTH is a decode error, not a RecursionError from the parser or from whatever walks the result later
(deepcopy, pydantic)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from backend.errors import SpecError
from backend.regular_files import read_config_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_DEPTH = 32  # no preset or setting nests more than a few levels
TOMLDecodeError = tomllib.TOMLDecodeError


def _too_deep(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def parse_toml(text: str) -> dict[str, Any]:
    """tomllib.loads, but nesting beyond MAX_DEPTH raises TOMLDecodeError (one line) like any bad TOML."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise TOMLDecodeError(f"nested deeper than {MAX_DEPTH} levels") from None
    if _too_deep(data):
        raise TOMLDecodeError(f"nested deeper than {MAX_DEPTH} levels")
    return data


def read_toml_file(path: Path, what: str) -> dict[str, Any]:
    """An operator's TOML file (`what`: "config file", "notify file"), refused by type before it is opened
    (a FIFO would block); what is wrong with it is one SpecError line."""
    try:
        return parse_toml(read_config_text(path, what))  # size-capped before reading
    except UnicodeDecodeError as err:
        raise SpecError(f"cannot read {what} {path}: not UTF-8 text (byte {err.start})") from None
    except (OSError, TOMLDecodeError) as err:
        raise SpecError(f"cannot read {what} {path}: {err}") from None
