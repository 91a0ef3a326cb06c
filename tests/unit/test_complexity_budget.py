"""The product's complexity budget (issue 33): few branchy functions, and none past reading.

radon's cyclomatic complexity over every .py file under backend/, console/ and shim/ (not tests/, bench/):
functions and methods, nested ones (closures) included, classes themselves not counted. At most 1.0
function of complexity >= 11 per 1,000 physical lines, and none above 25. A function that grows past 10
is the one to split (a helper, a table of data): the house habit is <= 10, this is the ceiling.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("backend", "console", "shim")
BRANCHY = 11  # complexity from which a function counts against the budget
PER_1000_LINES = 1.0
CEILING = 25


def _functions(blocks: list[Function | Class]) -> Iterator[Function]:
    """Every function and method in radon's blocks, closures and inner classes' methods included."""
    for block in blocks:
        if isinstance(block, Class):
            yield from _functions([*block.methods, *block.inner_classes])
        else:
            yield block
            yield from _functions(block.closures)


def _measure() -> tuple[int, list[tuple[int, str]]]:
    """(physical lines, [(complexity, "file:line name")]) over the product's files."""
    lines = 0
    scored: list[tuple[int, str]] = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            lines += len(text.splitlines())
            rel = path.relative_to(ROOT)
            # cc_visit lists a top-level class's methods beside it: walk from the classes, once each.
            top = [b for b in cc_visit(text) if isinstance(b, Class) or not b.is_method]
            for fn in _functions(top):
                scored.append((fn.complexity, f"{rel}:{fn.lineno} {fn.fullname}"))
    return lines, scored


def _worst(scored: list[tuple[int, str]], floor: int) -> str:
    """The functions at or above floor, worst first, one a line."""
    return "\n".join(f"  {c:3d}  {where}" for c, where in sorted(scored, reverse=True) if c >= floor)


def test_branchy_functions_within_budget() -> None:
    lines, scored = _measure()
    assert lines > 1000 and scored, "found no product code to measure"
    branchy = sum(1 for c, _ in scored if c >= BRANCHY)
    rate = branchy * 1000 / lines
    assert rate <= PER_1000_LINES, (
        f"{branchy} functions of complexity >= {BRANCHY} in {lines} lines = {rate:.2f}/1000 "
        f"(budget {PER_1000_LINES}); split the worst:\n{_worst(scored, BRANCHY)}"
    )


def test_no_function_above_ceiling() -> None:
    _, scored = _measure()
    assert scored, "found no product code to measure"
    assert max(c for c, _ in scored) <= CEILING, (
        f"functions above complexity {CEILING}:\n{_worst(scored, CEILING + 1)}"
    )
