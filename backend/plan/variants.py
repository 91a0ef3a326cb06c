"""Model variants an operator can pick: the recipe presets plus checkpoints found on disk.

A checkpoint is a directory under `paths.model_dir` holding a `config.json`. A name matching
`<N>layer` is a slice of the full model. Each variant resolves to a preset plus the overrides that
point it at the checkpoint, so the console only lists variants and asks for their spec.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from backend.json_fields import Fields
from backend.plan.spec import SLICE_NAME, list_presets, load_preset_dict
from backend.sanitize import one_line

MAX_SCAN = 500  # directory entries read under model_dir; a huge shared dir must not stall the picker


@dataclass(frozen=True)
class Variant:
    """One choice in the variant picker."""

    key: str  # stable id: "preset:<name>" or "checkpoint:<dir name>"
    label: str
    kind: str  # "file" | "preset" | "checkpoint"
    preset: str
    overrides: tuple[tuple[str, object], ...] = field(default=())
    slice_layers: int | None = None

    @property
    def is_slice(self) -> bool:
        return self.slice_layers is not None


def _slice_layers(name: str) -> int | None:
    match = SLICE_NAME.search(name)
    return int(match.group(1)) if match else None


def _preset_models() -> dict[str, tuple[str, int]]:
    """preset -> (model directory name, num_layers), read from the preset files."""
    out: dict[str, tuple[str, int]] = {}
    for name in list_presets():
        preset = Fields(load_preset_dict(name))
        if not isinstance(preset.value("model"), dict):
            continue  # configs/ also holds non-recipe files (e.g. alerts.toml)
        model = preset.obj("model")
        out[name] = (model.text("name"), model.integer("num_layers"))
    return out


def find_checkpoints(model_dir: str | os.PathLike[str]) -> list[Path]:
    """Directories directly under `model_dir` that hold a config.json (sorted by name)."""
    root = Path(model_dir).expanduser()
    found: list[Path] = []
    try:
        with os.scandir(root) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_SCAN:
                    break
                if entry.is_dir(follow_symlinks=True) and (Path(entry.path) / "config.json").is_file():
                    found.append(Path(entry.path))
    except OSError:
        return []
    return sorted(found, key=lambda p: p.name)


def _preset_for(name: str, models: dict[str, tuple[str, int]], default: str) -> str:
    """The preset whose model a checkpoint directory is: same name, else same slice depth."""
    for preset, (model_name, _layers) in models.items():
        if model_name == name:
            return preset
    layers = _slice_layers(name)
    if layers is not None:
        for preset, (_model_name, n) in models.items():
            if n == layers:
                return preset
    return default


def list_variants(
    model_dir: str | os.PathLike[str] | None, default_preset: str, current: str | None = None
) -> list[Variant]:
    """The operator's own preset file (`current`, when it is a path, e.g. the demo's), then the
    presets, then checkpoints under `model_dir` not already named by a preset."""
    models = _preset_models()
    variants: list[Variant] = []
    if current and current not in models:
        model = Fields(load_preset_dict(current)).obj("model")
        variants.append(
            Variant(
                key=f"file:{current}",
                label=f"{one_line(Path(current).stem)} (file)",
                kind="file",
                preset=current,
                slice_layers=_slice_layers(model.text("name")),
            )
        )
    variants += [
        Variant(
            key=f"preset:{name}",
            label=f"{name} (preset)",
            kind="preset",
            preset=name,
            slice_layers=_slice_layers(models[name][0]),
        )
        for name in models
    ]
    preset_models = {m for m, _ in models.values()}
    for path in find_checkpoints(model_dir) if model_dir else []:
        layers = _slice_layers(path.name)
        preset = _preset_for(path.name, models, default_preset)
        overrides: tuple[tuple[str, object], ...] = ()
        if path.name not in preset_models:
            overrides = (("model.name", path.name), ("paths.model_dir", str(path.parent)))
        kind_text = f"{layers}-layer slice" if layers is not None else "checkpoint"
        variants.append(
            Variant(
                key=f"checkpoint:{path.name}",
                label=f"{one_line(path.name)} ({kind_text})",
                kind="checkpoint",
                preset=preset,
                overrides=overrides,
                slice_layers=layers,
            )
        )
    return variants
