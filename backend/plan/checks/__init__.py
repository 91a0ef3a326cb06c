"""The layout rule engine: `check(spec)` gives every finding the spec alone can decide.

Each rule of the catalog (`backend.plan.catalog.RULES`: title, fields, source, status, as data) that the
spec can decide is checked here under its catalog id, one module per catalog section (A grid, B model
config, C Megatron's argument validation, D hybrid stack, E MoE at run time, F MTP head, G SGLang engine,
H miles). Section M (M1–M3) is ultra-console's own: the memory estimates of `backend.plan.sizing` as
checks. Rules that need a runtime, a flag the recipe never passes or a value the spec cannot hold are in
the catalog with status "n/a"/"covered" and never fire.

Verdicts follow what the real stack (miles → Megatron fork → SGLang) does with the layout, in the order it
runs: hard failures are errors; silent corrections (SP dropped at TP=1, colocate overriding rollout GPUs, an
unset ETP defaulting to TP) are warnings; launcher-script restrictions that train.py itself accepts are info,
because ultra-console submits train.py directly. Model-construction checks that have no CPU entry point
(E2, E4, G9–G12) are re-derived arithmetically.

Speed matters (the plan form re-checks on every keystroke): one pass reads the spec into a slotted context
(`context.LayoutContext`), pattern counts are cached, and no pydantic validation runs in here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backend.plan.catalog import CHECKED, ORDER, RULES, LayoutRule
from backend.plan.checks import (
    grid,
    hybrid,
    megatron_args,
    memory,
    miles_args,
    model_config,
    moe_runtime,
    mtp,
    rollout_engine,
)
from backend.plan.checks.context import Check, LayoutContext
from backend.plan.finding import Finding, has_errors

if TYPE_CHECKING:
    from backend.plan.spec import RunSpec

__all__ = ["CHECKED", "RULES", "Finding", "LayoutRule", "check", "has_errors"]

_SECTIONS = (grid, model_config, megatron_args, hybrid, moe_runtime, mtp, rollout_engine, miles_args, memory)
CHECKS: dict[str, Check] = {rule: fn for section in _SECTIONS for rule, fn in section.CHECKS.items()}
"""Every checked rule's check by id, in catalog order."""

if set(CHECKS) != set(CHECKED):  # pragma: no cover - catalog and engine must agree
    raise RuntimeError(f"rule engine and catalog disagree: {sorted(set(CHECKED) ^ set(CHECKS))}")

_PIPELINE: tuple[Check, ...] = tuple(CHECKS.values())


def _sort_key(f: Finding) -> tuple[int, int]:
    return f.severity.rank, ORDER[f.rule]


def check(spec: RunSpec) -> list[Finding]:
    """Every finding for a spec: errors first, then warnings, then info; catalog order within each."""
    c = LayoutContext(spec)
    for rule in _PIPELINE:
        rule(c)
    c.out.sort(key=_sort_key)
    return c.out
