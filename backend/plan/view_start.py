"""Where the plan view starts: the variants, the one to begin with, its preset dict and its evaluation.

Computed the same way in the console's process and in the preview helper (backend/plan/preview_process.py),
whose JSON copy the first frame draws from. Variant objects and pydantic stay out of the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.plan.evaluation import PlanEvaluation, evaluate

if TYPE_CHECKING:
    from backend.plan.variants import Variant


@dataclass
class PlanStart:
    choices: list[tuple[str, str]] = field(default_factory=list)  # (label, key) of every variant
    variant: str | None = None  # the key of the one shown
    base: dict[str, Any] | None = None  # its preset dict with the checkpoint overrides applied
    evaluation: PlanEvaluation = field(default_factory=PlanEvaluation)
    notices: list[str] = field(default_factory=list)  # one-line problems met on the way (a bad preset)

    def to_json(self) -> dict[str, Any]:
        return {
            "choices": [list(c) for c in self.choices],
            "variant": self.variant,
            "base": self.base,
            "evaluation": self.evaluation.to_json(),
            "notices": self.notices,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanStart:
        return cls(
            [(str(label), str(key)) for label, key in data["choices"]],
            data["variant"],
            data["base"],
            PlanEvaluation.from_json(data["evaluation"]),
            [str(n) for n in data["notices"]],
        )


def field_text(base: Mapping[str, Any], path: str) -> str:
    """The text the plan form shows for a dotted path of a preset dict: TOML's spelling of the value,
    "none" where the preset leaves it unset. An edit back to this text is no edit."""
    node: Any = base
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        return "none"
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def list_choices(preset: str | None, model_dir: str | None) -> tuple[list[Variant], str, list[str]]:
    """(variants, the configured preset, notices): the presets plus checkpoints under `model_dir`
    (the configured preset's `paths.model_dir` when None)."""
    from backend.plan.spec import (  # lazy: not on the first frame (console_frame.py)
        DEFAULT_PRESET,
        load_preset_dict,
    )
    from backend.plan.variants import list_variants

    preset = preset or DEFAULT_PRESET
    notices: list[str] = []
    try:
        model_dir = model_dir or Fields(load_preset_dict(preset)).obj("paths").optional_text("model_dir")
    except ConsoleError as err:
        notices.append(str(err))
        preset, model_dir = DEFAULT_PRESET, None
    return list_variants(model_dir, DEFAULT_PRESET, current=preset), preset, notices


def variant_base(variant: Variant) -> dict[str, Any]:
    """A variant's preset dict plus the overrides pointing at its checkpoint (raises ConsoleError)."""
    from backend.plan.spec import load_preset_dict  # lazy: not on the first frame (console_frame.py)

    base = load_preset_dict(variant.preset)
    for path, value in variant.overrides:
        node = base
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return base


def plan_start(preset: str | None, model_dir: str | None, *, run_id: str | None, address: str) -> PlanStart:
    """The configured preset's variant (else the first), evaluated with no edits."""
    variants, preset, notices = list_choices(preset, model_dir)
    start = PlanStart([(v.label, v.key) for v in variants], notices=notices)
    first = next(
        (v for v in variants if v.preset == preset and v.kind in ("file", "preset")),
        variants[0] if variants else None,
    )
    if first is None:
        return start
    start.variant = first.key
    try:
        start.base = variant_base(first)
    except ConsoleError as err:
        start.notices.append(str(err))
        return start
    start.evaluation = evaluate(start.base, {}, run_id=run_id, address=address)
    return start
