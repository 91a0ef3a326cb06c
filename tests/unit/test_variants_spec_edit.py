"""backend.plan.variants (checkpoint discovery) and backend.plan.spec_edit (field-wise edits)."""

from __future__ import annotations

from pathlib import Path

from backend.plan.spec import DEFAULT_PRESET, list_presets, load_preset_dict
from backend.plan.spec_edit import edit_spec
from backend.plan.variants import find_checkpoints, list_variants

MODELS = Path(__file__).resolve().parents[1] / "data" / "app_models"


def test_checkpoints_need_config_json():
    names = [p.name for p in find_checkpoints(MODELS)]
    assert names == ["NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16-4layer", "Nemotron-Ultra-2layer-test"]
    assert find_checkpoints(MODELS / "missing") == []


def test_variants_map_checkpoints_to_presets():
    by_key = {v.key: v for v in list_variants(MODELS, DEFAULT_PRESET)}
    four = by_key["checkpoint:NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16-4layer"]
    assert (
        four.preset == "nemotron-3-ultra-550b-a55b-4layer" and four.overrides == () and four.slice_layers == 4
    )
    two = by_key["checkpoint:Nemotron-Ultra-2layer-test"]
    assert two.is_slice and two.slice_layers == 2 and two.preset == DEFAULT_PRESET
    assert ("model.name", "Nemotron-Ultra-2layer-test") in two.overrides
    assert not by_key[f"preset:{DEFAULT_PRESET}"].is_slice


def test_edit_reports_each_bad_field_and_keeps_the_rest():
    base = load_preset_dict(DEFAULT_PRESET)
    result = edit_spec(
        base,
        {
            "cluster.nodes": "4",
            "train.tp": "0",
            "rollout.mem_fraction": "lots",
            "batch.global_batch_size": "",
            "train.etp": "none",
        },
    )
    assert set(result.field_errors) == {"train.tp", "rollout.mem_fraction", "batch.global_batch_size"}
    assert "greater than 0" in result.field_errors["train.tp"]
    assert result.spec is not None and not result.ok
    assert result.spec.cluster.nodes == 4 and result.spec.train.tp == 8 and result.spec.train.etp is None


def test_edit_unknown_key_is_a_field_error():
    result = edit_spec(load_preset_dict(DEFAULT_PRESET), {"train.tpp": "2"})
    assert "unknown key" in result.field_errors["train.tpp"]
    assert result.spec is not None


def test_clean_edit_is_ok():
    result = edit_spec(load_preset_dict(DEFAULT_PRESET), {"train.pp": "2"})
    assert result.ok and result.spec is not None and result.spec.train.pp == 2


def test_a_preset_file_comes_first(tmp_path):
    from backend.plan.spec import dump_toml, load_preset

    path = tmp_path / "mine.toml"
    path.write_text(dump_toml(load_preset("nemotron-3-ultra-550b-a55b-4layer")), encoding="utf-8")
    variants = list_variants(None, DEFAULT_PRESET, current=str(path))
    assert variants[0].key == f"file:{path}" and variants[0].kind == "file" and variants[0].slice_layers == 4
    named = list_variants(None, DEFAULT_PRESET, current=DEFAULT_PRESET)
    assert [v.preset for v in named] == [p for p in list_presets() if p.startswith("nemotron")]
    assert all(v.kind == "preset" for v in named)
