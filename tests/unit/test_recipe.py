"""Presets as data: loading by name or path, overrides, clear one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.errors import SpecError
from backend.plan.spec import (
    DEFAULT_PRESET,
    SETTABLE_KEYS,
    build_spec,
    dump_toml,
    list_presets,
    load_preset,
    load_preset_dict,
)

SLICE = "nemotron-3-ultra-550b-a55b-4layer"
REQUIRED_KEYS = [
    "cluster.nodes",
    "cluster.gpus_per_node",
    "train.tp",
    "train.pp",
    "train.cp",
    "train.ep",
    "train.etp",
    "rollout.gpus_per_engine",
    "rollout.ep",
    "rollout.dp",
    "rollout.mem_fraction",
    "batch.num_rollout",
    "batch.rollout_batch_size",
    "batch.n_samples_per_prompt",
    "batch.global_batch_size",
    "batch.max_tokens_per_gpu",
    "run.id",
    "run.mode",
    "run.extra_args",
    "paths.miles_root",
    "paths.train_script",
    "paths.model_dir",
    "paths.data_dir",
    "paths.output_dir",
    "paths.megatron_path",
]


def test_both_presets_are_listed_and_load() -> None:
    assert {DEFAULT_PRESET, SLICE} <= set(list_presets())
    full, part = load_preset(DEFAULT_PRESET), load_preset(SLICE)
    assert (full.cluster.nodes, full.cluster.total_gpus, full.model.num_layers) == (16, 128, 108)
    assert (part.cluster.nodes, part.cluster.total_gpus, part.model.num_layers) == (1, 8, 4)
    assert len(full.model.hybrid_pattern) == 108 and full.model.hybrid_pattern.count("E") == 48
    assert part.model.hybrid_pattern == "ME*E" and part.model.is_slice and not full.model.is_slice
    assert full.model.routed_scaling_factor == 5.0 and full.model.mamba_num_groups == 8


def test_default_preset_is_the_full_model() -> None:
    assert build_spec().preset == DEFAULT_PRESET


def test_preset_by_path(tmp_path: Path) -> None:
    src = (Path(__file__).parents[2] / "configs" / f"{SLICE}.toml").read_text()
    path = tmp_path / "mine.toml"
    path.write_text(src.replace("nodes = 1", "nodes = 2"))
    spec = build_spec(str(path))
    assert spec.cluster.nodes == 2 and spec.preset == "mine"


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_issue_keys_are_settable(key: str) -> None:
    assert key in SETTABLE_KEYS


def test_overrides_apply_with_types() -> None:
    spec = build_spec(
        SLICE, ["train.tp=2", "rollout.mem_fraction=0.5", "run.mode=debug_minimal", "train.etp=none"]
    )
    assert spec.train.tp == 2 and spec.rollout.mem_fraction == 0.5 and spec.run.mode == "debug_minimal"
    assert spec.train.etp is None


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["train.tpp=2"], "unknown key 'train.tpp'"),
        (["tp=2"], "did you mean train.tp"),
        (["train.tp=two"], "train.tp"),
        (["train.tp=0"], "train.tp"),
        (["run.mode=fast"], "run.mode"),
        (["rollout.mem_fraction=1.5"], "rollout.mem_fraction"),
        (["train.tp"], "KEY=VALUE"),
    ],
)
def test_bad_overrides_are_one_clear_line(overrides: list[str], needle: str) -> None:
    with pytest.raises(SpecError) as err:
        build_spec(None, overrides)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(SpecError, match="known presets"):
        build_spec("nemotron-9000")


def test_other_data_in_configs_is_not_a_preset() -> None:
    assert "alerts" not in list_presets()
    with pytest.raises(SpecError, match="unknown preset 'alerts'"):
        build_spec("alerts")


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda s: s.replace("[cluster]", "[cluster]\nbogus = 1"), "unknown key 'cluster.bogus'"),
        (lambda s: s.replace("tp = 8", 'tp = "eight"'), "train.tp"),
        (lambda s: s.replace("[model]", "[model"), "not valid TOML"),
        (lambda s: s.replace('hybrid_pattern = "', 'hybrid_pattern = "X'), "unknown layer symbols"),
        (lambda s: s.replace('lr = "1e-6"', 'lr = "fast"'), "optimizer.lr"),
    ],
)
def test_bad_preset_files_are_clear_errors(tmp_path: Path, edit, needle: str) -> None:
    src = (Path(__file__).parents[2] / "configs" / f"{DEFAULT_PRESET}.toml").read_text()
    path = tmp_path / "bad.toml"
    path.write_text(edit(src))
    with pytest.raises(SpecError) as err:
        build_spec(str(path))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_numbers_keep_the_text_miles_receives() -> None:
    spec = build_spec(None, ["optimizer.lr=1e-6"])
    assert spec.optimizer.lr in ("1e-6", "1e-06")
    assert build_spec().optimizer.lr == "1e-6" and build_spec().grpo.kl_loss_coef == "0.00"


def test_dump_roundtrip(tmp_path: Path) -> None:
    spec = build_spec(SLICE, ["train.tp=2"])
    path = tmp_path / "edited.toml"
    path.write_text(dump_toml(spec))
    again = build_spec(str(path))
    assert again.model_dump(exclude={"preset"}) == spec.model_dump(exclude={"preset"})


def test_preset_dict_is_plain_data() -> None:
    data = load_preset_dict(SLICE)
    assert data["train"]["ep"] == 8 and data["preset"] == SLICE
