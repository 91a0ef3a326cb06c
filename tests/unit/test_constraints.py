"""Rule engine: presets plan clean, every checked catalog rule fires on a layout that breaks it and stays
quiet on one that does not, findings carry real numbers and fixes, and the API keeps its shape."""

from __future__ import annotations

import dataclasses
import json
import re
from functools import cache
from typing import Any

import pytest

from backend.plan import checks as constraints
from backend.plan.catalog import CHECKED, RULES
from backend.plan.checks import Finding, check, has_errors
from backend.plan.derived import LayoutFigures, layout_figures
from backend.plan.spec import SETTABLE_KEYS, RunSpec, apply_overrides, load_preset_dict, spec_from_dict
from backend.severity import Severity

FULL = "nemotron-3-ultra-550b-a55b"
SLICE = "nemotron-3-ultra-550b-a55b-4layer"
KEEP = {"MILES_NEMOTRONH_KEEP_MTP": "1"}


@cache
def _preset(name: str) -> dict[str, Any]:
    return load_preset_dict(name)


def make(preset: str, sets: dict[str, Any] | None = None) -> RunSpec:
    """A validated spec: preset + dotted overrides (the same path the CLI's --set takes)."""
    return spec_from_dict(apply_overrides(_preset(preset), list((sets or {}).items())))


def fired(spec: RunSpec, rule: str) -> list[Finding]:
    return [f for f in check(spec) if f.rule == rule]


# --------------------------------------------------------------------------- presets


@pytest.mark.parametrize("preset", [FULL, SLICE])
def test_presets_plan_without_any_finding(preset: str) -> None:
    findings = check(make(preset))
    assert findings == [], [f.to_json() for f in findings]
    assert not has_errors(findings)


# ----------------------------------------------------------------- one breaking + one passing layout per rule

# (rule, preset, overrides, severity, fields the finding must name)
BREAKS: list[tuple[str, str, dict[str, Any], str, set[str]]] = [
    ("A1", FULL, {"cluster.nodes": 15}, "error", {"train.tp", "train.pp", "cluster.nodes"}),
    ("A2", FULL, {"train.ep": 64}, "error", {"train.ep", "train.etp", "cluster.nodes"}),
    ("A3", FULL, {"train.etp": None}, "warning", {"train.etp"}),
    ("A8", SLICE, {"train.vpp": 2}, "error", {"train.vpp", "train.pp"}),
    ("B1", FULL, {"train.tp": 3}, "error", {"train.tp", "model.num_attention_heads"}),
    ("B2", FULL, {"model.num_query_groups": 3}, "error", {"train.tp", "model.num_query_groups"}),
    (
        "B4",
        FULL,
        {"train.sequence_parallel": False},
        "warning",
        {"train.sequence_parallel", "train.tp", "train.ep"},
    ),
    (
        "B7",
        FULL,
        {"train.decoder_first_pipeline_num_layers": 26},
        "error",
        {"train.decoder_first_pipeline_num_layers", "train.pp"},
    ),
    (
        "B7",
        FULL,
        {"train.decoder_last_pipeline_num_layers": 0},
        "error",
        {"train.decoder_last_pipeline_num_layers"},
    ),
    (
        "B7",
        FULL,
        {"train.pp": 3, "cluster.nodes": 12, "train.decoder_first_pipeline_num_layers": 2, "train.vpp": 2},
        "error",
        {"train.vpp", "train.pp"},
    ),
    ("B10", FULL, {"train.moe_token_dispatcher": "allgather"}, "warning", {"train.moe_token_dispatcher"}),
    (
        "B10",
        FULL,
        {
            "model.moe_latent_size": None,
            "train.moe_shared_expert_overlap": True,
            "train.moe_token_dispatcher": "flex",
        },
        "error",
        {"train.moe_shared_expert_overlap", "train.moe_token_dispatcher"},
    ),
    (
        "B11",
        FULL,
        {"train.moe_shared_expert_overlap": True},
        "warning",
        {"train.moe_shared_expert_overlap", "model.moe_latent_size"},
    ),
    (
        "B12",
        FULL,
        {"model.add_bias_linear": True, "train.ep": 16, "train.etp": 2},
        "error",
        {"model.add_bias_linear", "train.etp"},
    ),
    ("B13", FULL, {"model.n_group": 3}, "error", {"model.n_group", "model.num_experts"}),
    ("B13", FULL, {"model.topk_group": 2}, "error", {"model.topk_group", "model.n_group"}),
    ("B14", FULL, {"train.recompute_method": None}, "error", {"train.recompute_method"}),
    ("B14", FULL, {"train.recompute_num_layers": None}, "error", {"train.recompute_num_layers"}),
    (
        "B14",
        FULL,
        {"train.recompute_granularity": "selective"},
        "error",
        {"train.recompute_granularity", "train.recompute_num_layers"},
    ),
    ("C2", SLICE, {"train.pp": 3, "cluster.gpus_per_node": 6}, "error", {"train.pp", "model.num_layers"}),
    ("C3", SLICE, {"train.vpp": 2}, "error", {"train.vpp", "train.pp"}),
    (
        "C3",
        FULL,
        {"train.vpp": 2, "train.pp": 2, "run.extra_args": "--no-overlap-p2p-communication"},
        "error",
        {"train.vpp", "train.pp", "run.extra_args"},
    ),
    (
        "B7",
        SLICE,
        {"train.decoder_first_pipeline_num_layers": 2},
        "error",
        {"train.decoder_first_pipeline_num_layers", "train.pp"},
    ),
    ("D7", FULL, {"train.pp": 5, "cluster.nodes": 20, "train.vpp": 1}, "error", {"train.vpp", "train.pp"}),
    ("C4", FULL, {"train.ep": 3}, "error", {"train.ep", "model.num_experts"}),
    ("C5", SLICE, {"train.sequence_parallel": True}, "warning", {"train.sequence_parallel", "train.tp"}),
    (
        "C8",
        FULL,
        {"batch.global_batch_size": 130},
        "error",
        {"batch.global_batch_size", "train.micro_batch_size"},
    ),
    (
        "C10",
        FULL,
        {"model.position_embedding_type": "learned_absolute", "run.extra_env": KEEP},
        "error",
        {"model.position_embedding_type", "run.extra_env"},
    ),
    (
        "C11",
        FULL,
        {"run.extra_env": {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}},
        "error",
        {"run.extra_env", "train.tp"},
    ),
    ("D1", FULL, {"model.mamba_num_heads": 260}, "error", {"train.tp", "model.mamba_num_heads"}),
    ("D2", FULL, {"train.tp": 16}, "error", {"train.tp", "model.mamba_num_groups"}),
    (
        "D3",
        SLICE,
        {"model.mamba_num_groups": 3},
        "error",
        {"model.mamba_num_heads", "model.mamba_num_groups"},
    ),
    ("D5", FULL, {"model.num_layers": 100}, "error", {"model.hybrid_pattern", "model.num_layers"}),
    ("D7", FULL, {"train.vpp": 3}, "error", {"train.vpp"}),
    (
        "D7",
        FULL,
        {"train.decoder_first_pipeline_num_layers": 27},
        "warning",
        {"train.decoder_first_pipeline_num_layers", "train.decoder_last_pipeline_num_layers"},
    ),
    (
        "D7",
        FULL,
        {"train.pp": 5, "train.decoder_first_pipeline_num_layers": 20},
        "error",
        {"train.pp", "model.num_layers"},
    ),
    ("D10", FULL, {"model.mtp_pattern": "*X"}, "error", {"model.mtp_pattern"}),
    ("E2", FULL, {"train.sequence_parallel": False}, "error", {"train.sequence_parallel", "train.tp"}),
    (
        "E4",
        FULL,
        {"model.shared_expert_intermediate_size": 10004},
        "error",
        {"train.tp", "model.shared_expert_intermediate_size"},
    ),
    (
        "E4",
        FULL,
        {"train.ep": 16, "train.etp": 2, "model.moe_ffn_hidden_size": 5121},
        "error",
        {"train.etp", "model.moe_ffn_hidden_size"},
    ),
    ("F1", FULL, {"run.extra_env": KEEP}, "info", {"run.extra_env", "train.pp"}),
    ("F2", FULL, {"model.mtp_pattern": ""}, "error", {"model.mtp_pattern", "model.mtp_num_layers"}),
    ("F3", FULL, {"run.extra_args": "--enable-mtp-training"}, "error", {"run.extra_args"}),
    ("F3", FULL, {"run.extra_env": KEEP}, "info", {"run.extra_env"}),
    ("G1", FULL, {"rollout.dp": 3}, "error", {"rollout.dp", "rollout.gpus_per_engine"}),
    (
        "G4",
        FULL,
        {"cluster.gpus_per_node": 6, "cluster.nodes": 16, "rollout.gpus_per_engine": 20, "rollout.ep": 20},
        "error",
        {"rollout.gpus_per_engine", "cluster.gpus_per_node"},
    ),
    ("G6", FULL, {"rollout.ep": 16}, "error", {"rollout.ep", "rollout.gpus_per_engine"}),
    (
        "G7",
        FULL,
        {"rollout.sglang_attention_backend": "triton"},
        "error",
        {"rollout.sglang_attention_backend"},
    ),
    (
        "G9",
        FULL,
        {"rollout.dp": 2},
        "error",
        {"rollout.dp", "rollout.gpus_per_engine", "model.mamba_num_groups"},
    ),
    ("G10", SLICE, {"model.num_attention_heads": 62}, "error", {"rollout.dp", "model.num_attention_heads"}),
    (
        "G11",
        FULL,
        {"rollout.ep": 1, "model.moe_ffn_hidden_size": 5104},
        "error",
        {"rollout.ep", "model.moe_ffn_hidden_size"},
    ),
    ("G11", FULL, {"rollout.ep": 24}, "error", {"rollout.ep", "rollout.gpus_per_engine"}),
    (
        "G12",
        FULL,
        {"rollout.gpus_per_engine": 20, "rollout.ep": 20},
        "error",
        {"rollout.gpus_per_engine", "cluster.gpus_per_node"},
    ),
    (
        "G12",
        SLICE,
        {"rollout.gpus_per_engine": 3, "rollout.ep": 3, "rollout.dp": 1},
        "warning",
        {"rollout.gpus_per_engine"},
    ),
    (
        "H2",
        FULL,
        {"rollout.enable_dp_attention": False},
        "error",
        {"rollout.dp", "rollout.enable_dp_attention"},
    ),
    ("H3", FULL, {"rollout.num_gpus": 64}, "warning", {"rollout.num_gpus", "rollout.colocate"}),
    ("H3", FULL, {"rollout.colocate": False}, "error", {"rollout.num_gpus", "rollout.colocate"}),
    ("H4", FULL, {"cluster.nodes": 15}, "warning", {"rollout.gpus_per_engine", "cluster.nodes"}),
    (
        "H4",
        FULL,
        {"rollout.colocate": False, "rollout.num_gpus": 16},
        "error",
        {"rollout.gpus_per_engine", "rollout.num_gpus"},
    ),
    (
        "H6",
        FULL,
        {"batch.num_steps_per_rollout": 4},
        "error",
        {"batch.global_batch_size", "batch.num_steps_per_rollout"},
    ),
    (
        "H6",
        FULL,
        {"batch.global_batch_size": 512},
        "error",
        {"batch.global_batch_size", "batch.rollout_batch_size"},
    ),
    ("H6", FULL, {"batch.global_batch_size": 96}, "warning", {"batch.global_batch_size"}),
    (
        "H7",
        FULL,
        {"batch.over_sampling_batch_size": 16},
        "error",
        {"batch.over_sampling_batch_size", "batch.rollout_batch_size"},
    ),
    (
        "H8",
        FULL,
        {"batch.max_tokens_per_gpu": None},
        "error",
        {"train.use_dynamic_batch_size", "batch.max_tokens_per_gpu"},
    ),
    (
        "H10",
        SLICE,
        {"train.decoder_first_pipeline_num_layers": 2},
        "error",
        {"train.decoder_first_pipeline_num_layers", "train.pp"},
    ),
    ("H12", FULL, {"train.pp": 2}, "info", {"train.pp"}),
    ("H12", SLICE, {"rollout.mem_fraction": 0.7}, "info", {"rollout.mem_fraction"}),
    ("H13", SLICE, {"run.extra_args": "--rollout-batchsize 8"}, "error", {"run.extra_args"}),
    ("H13", SLICE, {"run.extra_args": "--kl-loss-type k4"}, "error", {"run.extra_args"}),
    ("H14", SLICE, {"run.extra_args": "--tensor-model-parallel-size 2"}, "warning", {"run.extra_args"}),
    ("H15", FULL, {"train.micro_batch_size": 2}, "warning", {"train.micro_batch_size"}),
    ("M1", FULL, {"cluster.gpu_memory_gb": 30}, "error", {"cluster.gpu_memory_gb", "train.ep"}),
    ("M1", FULL, {"cluster.gpu_memory_gb": 40}, "warning", {"cluster.gpu_memory_gb"}),
    (
        "M2",
        FULL,
        {"cluster.host_memory_gb": 500},
        "error",
        {"cluster.host_memory_gb", "optimizer.cpu_offload"},
    ),
    ("M2", FULL, {"cluster.host_memory_gb": 650}, "warning", {"cluster.host_memory_gb"}),
    (
        "M3",
        FULL,
        {"rollout.gpus_per_engine": 8, "rollout.ep": 8, "rollout.dp": 1},
        "error",
        {"rollout.gpus_per_engine", "rollout.mem_fraction", "cluster.gpu_memory_gb"},
    ),
    ("M3", FULL, {"rollout.mem_fraction": 0.35}, "warning", {"rollout.mem_fraction"}),
]

# (rule, preset, overrides) close to the breaking layout, on the legal side
PASSES: list[tuple[str, str, dict[str, Any]]] = [
    ("A1", FULL, {"cluster.nodes": 32}),
    ("A2", FULL, {"train.ep": 16}),
    ("A3", SLICE, {"train.etp": None}),
    ("A8", FULL, {"train.vpp": None}),
    ("A8", SLICE, {"train.vpp": 1}),
    ("B1", FULL, {"train.tp": 4}),
    ("B2", FULL, {"model.num_query_groups": 4}),
    ("B4", FULL, {"train.sequence_parallel": True}),
    ("B7", FULL, {"train.decoder_first_pipeline_num_layers": 27}),
    ("B10", FULL, {"model.moe_latent_size": None, "train.moe_shared_expert_overlap": True}),
    ("B11", FULL, {"train.moe_shared_expert_overlap": False}),
    ("B12", FULL, {"model.add_bias_linear": True}),
    ("B13", FULL, {"model.n_group": 8, "model.topk_group": 4}),
    (
        "B14",
        FULL,
        {
            "train.recompute_granularity": "selective",
            "train.recompute_method": None,
            "train.recompute_num_layers": None,
        },
    ),
    ("C2", FULL, {"train.pp": 2}),
    ("C3", FULL, {"train.vpp": 2, "train.pp": 2}),
    ("C4", FULL, {"train.ep": 16}),
    ("C5", FULL, {"train.sequence_parallel": True}),
    ("C8", FULL, {"batch.global_batch_size": 132}),
    ("C10", FULL, {"model.position_embedding_type": "learned_absolute"}),
    ("C11", SLICE, {"run.extra_env": {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}}),
    ("D1", FULL, {"model.mamba_num_heads": 128}),
    ("D2", FULL, {"train.tp": 4}),
    ("D3", SLICE, {"model.mamba_num_groups": 4}),
    ("D5", SLICE, {}),
    ("D7", FULL, {"train.pp": 2}),
    ("D10", FULL, {"model.mtp_pattern": "*E"}),
    ("E2", SLICE, {"train.sequence_parallel": False}),
    ("E4", FULL, {"model.shared_expert_intermediate_size": 10000}),
    ("F1", SLICE, {"run.extra_env": KEEP}),
    ("F2", FULL, {"model.mtp_pattern": "", "model.mtp_num_layers": 0}),
    ("F3", FULL, {"run.extra_args": ""}),
    ("G1", FULL, {"rollout.dp": 8}),
    ("G4", FULL, {"rollout.gpus_per_engine": 64, "rollout.ep": 64, "rollout.dp": 8}),
    ("G6", FULL, {"rollout.ep": 1}),
    ("G7", FULL, {"rollout.sglang_attention_backend": "fa3"}),
    ("G9", FULL, {"rollout.dp": 16}),
    ("G10", SLICE, {"model.num_attention_heads": 64}),
    ("G11", FULL, {"rollout.ep": 1}),
    ("G12", FULL, {"rollout.gpus_per_engine": 16, "rollout.ep": 16, "rollout.dp": 2}),
    ("H2", FULL, {"rollout.enable_dp_attention": False, "rollout.dp": 1}),
    ("H3", FULL, {"rollout.num_gpus": 128}),
    ("H4", FULL, {"rollout.colocate": False, "rollout.num_gpus": 96}),
    ("H6", FULL, {"batch.num_steps_per_rollout": 2}),
    ("H7", FULL, {"batch.over_sampling_batch_size": 64}),
    ("H8", FULL, {"batch.max_tokens_per_gpu": None, "train.use_dynamic_batch_size": False}),
    ("H10", FULL, {"train.decoder_first_pipeline_num_layers": 27}),
    ("H12", SLICE, {"cluster.nodes": 2, "train.ep": 16}),
    ("H13", SLICE, {"run.extra_args": "--kl-loss-type k3 --use-kl-loss --router-policy round_robin"}),
    ("H14", SLICE, {"run.extra_args": "--use-kl-loss"}),
    ("H15", FULL, {"train.micro_batch_size": 2, "train.use_dynamic_batch_size": False}),
    ("M1", FULL, {"optimizer.cpu_offload": False}),
    ("M2", FULL, {"cluster.host_memory_gb": 1000}),
    ("M3", FULL, {"rollout.mem_fraction": 0.6}),
]


def _case_id(case: tuple[Any, ...]) -> str:
    return f"{case[0]}-{'-'.join(f'{k}={v}' for k, v in case[2].items()) or 'preset'}"


@pytest.mark.parametrize("case", BREAKS, ids=_case_id)
def test_rule_fires_on_breaking_layout(case: tuple[str, str, dict[str, Any], str, set[str]]) -> None:
    rule, preset, sets, severity, fields = case
    hits = [f for f in fired(make(preset, sets), rule) if f.severity == severity]
    assert hits, f"{rule} did not fire as {severity}: {[f.to_json() for f in check(make(preset, sets))]}"
    assert any(fields <= set(f.fields) for f in hits), [f.fields for f in hits]
    for f in hits:
        assert re.search(r"\d|'[^']+'", f.message), f.message  # the actual numbers / values
        assert f.severity in RULES[rule].severities
        if f.severity != "info":
            assert f.fix, f"{rule} gives no fix"


@pytest.mark.parametrize("case", PASSES, ids=_case_id)
def test_rule_quiet_on_legal_layout(case: tuple[str, str, dict[str, Any]]) -> None:
    rule, preset, sets = case
    assert fired(make(preset, sets), rule) == []


def test_every_checked_rule_has_a_breaking_and_a_passing_case() -> None:
    assert {c[0] for c in BREAKS} == set(CHECKED)
    assert {c[0] for c in PASSES} == set(CHECKED)


# ------------------------------------------------------------------------ messages and fixes name the numbers


def test_fix_names_the_nearest_legal_values() -> None:
    (d2,) = fired(make(FULL, {"train.tp": 16}), "D2")
    assert "16" in d2.message and "8" in d2.message
    assert d2.fix == "TP must divide Mamba n_groups=8: use 1, 2, 4 or 8"
    (c2,) = fired(make(FULL, {"train.pp": 5}), "C2")
    assert "108" in c2.message and c2.fix.endswith("1, 2 or 4")
    (g9,) = fired(make(FULL, {"rollout.dp": 2}), "G9")
    assert "32/2 = 16" in g9.message and "rollout.dp 4, 8, 16 or 32" in g9.fix
    (a2,) = fired(make(FULL, {"train.ep": 64}), "A2")
    assert "1·64·4 = 256" in a2.message and "train.ep 4, 8, 16 or 32" in a2.fix
    (c8,) = fired(make(FULL, {"batch.global_batch_size": 130}), "C8")
    assert "128 or 132" in c8.fix
    (m3,) = fired(make(FULL, {"rollout.gpus_per_engine": 8, "rollout.ep": 8, "rollout.dp": 1}), "M3")
    assert "98.7 GB" in m3.message and "rollout.gpus_per_engine 16, 32 or 64" in m3.fix


def test_unset_etp_is_explained_in_the_expert_grid_error() -> None:
    spec = make(FULL, {"train.etp": None})
    (a2,) = fired(spec, "A2")
    assert "8·32·4 = 1024" in a2.message and "ETP = TP = 8" in a2.message
    assert "train.etp = 1" in a2.fix
    assert fired(spec, "A3")[0].severity == "warning"


def test_h12_names_only_the_fields_that_differ_from_the_launcher() -> None:
    (h12,) = fired(make(FULL, {"train.pp": 2}), "H12")
    assert h12.fields == ("train.pp",)
    assert "pp 2 (launcher: 4)" in h12.message


def test_sequence_parallel_at_tp1_is_a_warning_not_an_error() -> None:
    findings = check(make(SLICE, {"train.sequence_parallel": True}))
    assert [f.rule for f in findings] == ["C5"]
    assert not has_errors(findings)


def test_vpp_of_one_means_no_interleaving() -> None:
    # validate_args turns --num-virtual-stages-per-pipeline-rank 1 into "no VPP"
    assert check(make(FULL, {"train.vpp": 1})) == []


def test_colocate_override_is_a_warning_not_hidden() -> None:
    findings = check(make(SLICE, {"rollout.num_gpus": 4}))
    assert [(f.rule, f.severity) for f in findings] == [("H3", "warning")]


# --------------------------------------------------------------------------- API shape


def test_finding_shape() -> None:
    f = Finding("D2", Severity.ERROR, ("train.tp",), "msg", "fix")
    assert dataclasses.is_dataclass(f) and not hasattr(f, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.rule = "X"  # type: ignore[misc]
    assert f.to_json() == {
        "rule": "D2",
        "severity": "error",
        "fields": ["train.tp"],
        "message": "msg",
        "fix": "fix",
    }
    assert has_errors([f]) and not has_errors([dataclasses.replace(f, severity=Severity.WARNING)])


def test_findings_sorted_errors_then_warnings_then_info_in_catalog_order() -> None:
    spec = make(FULL, {"train.sequence_parallel": False, "train.pp": 5, "run.extra_env": KEEP})
    findings = check(spec)
    ranks = [{"error": 0, "warning": 1, "info": 2}[f.severity] for f in findings]
    assert ranks == sorted(ranks) and set(ranks) == {0, 1, 2}
    order = list(RULES)
    for sev in ("error", "warning", "info"):
        ids = [order.index(f.rule) for f in findings if f.severity == sev]
        assert ids == sorted(ids)
    assert check(spec) == findings  # deterministic


def test_catalog_covers_every_section_and_is_consistent() -> None:
    expected = (
        [f"A{i}" for i in range(1, 10)]
        + [f"B{i}" for i in range(1, 17)]
        + [f"C{i}" for i in range(1, 13)]
        + [f"D{i}" for i in range(1, 12)]
        + [f"E{i}" for i in range(1, 6)]
        + [f"F{i}" for i in range(1, 4)]
        + [f"G{i}" for i in range(1, 13)]
        + [f"H{i}" for i in range(1, 16)]
        + ["M1", "M2", "M3"]
    )
    assert list(RULES) == expected
    settable = set(SETTABLE_KEYS)
    for rule in RULES.values():
        assert rule.title and rule.source
        assert set(rule.fields) <= settable, (rule.id, set(rule.fields) - settable)
        if rule.status == "covered":
            named = re.findall(r"\b[A-HM]\d+\b", rule.note)
            assert named and any(RULES[n].status == "checked" for n in named), rule.id
        if rule.status != "checked":
            assert rule.note, rule.id
        json.dumps(rule.to_json())
    assert constraints.RULES is RULES


def test_every_finding_names_settable_fields() -> None:
    settable = set(SETTABLE_KEYS)
    for _, preset, sets, _, _ in BREAKS:
        for f in check(make(preset, sets)):
            assert f.fields and set(f.fields) <= settable, f
            assert RULES[f.rule].status == "checked"


# ------------------------------------------------------------------------- derived numbers: layout and memory


def test_derive_full_model_reproduces_the_documented_layout() -> None:
    d = layout_figures(make(FULL))
    assert LayoutFigures.from_json(json.loads(json.dumps(d.to_json()))) == d
    t, r, m = d.training, d.rollout, d.memory
    assert (t.world_size, t.dp, t.edp, t.etp, t.experts_per_rank) == (128, 4, 1, 1, 16)
    assert t.sequence_parallel is True
    assert t.layers_per_stage == 27
    assert [(s.layers, s.mamba, s.moe, s.attention) for s in t.stages] == [(27, 12, 12, 3)] * 4
    assert (r.engines, r.nodes_per_engine, r.attn_tp) == (4, 4, 8)
    assert r.moe_tp == 1 and r.experts_per_rank == 16
    assert d.batch.optimizer_steps_per_rollout == 2
    b = [p / 1e9 for p in m.params_per_gpu]
    assert b[0] == pytest.approx(5.550, abs=5e-4) and b[3] == pytest.approx(5.550, abs=5e-4)
    assert b[1] == pytest.approx(5.416, abs=5e-4) and b[2] == pytest.approx(5.416, abs=5e-4)
    assert m.params_per_gpu[0] == 5_549_973_632  # the first stage's parameters, counted by hand
    assert m.rollout_weights_gb_per_gpu is not None
    assert 42 <= m.rollout_weights_gb_per_gpu <= 44  # ≈ 21–22 B params of the rollout engine's shard, in bf16
    assert m.rollout_static_gb_per_gpu == pytest.approx(98.7)


def test_derive_slice_reproduces_the_documented_layout() -> None:
    d = layout_figures(make(SLICE))
    t = d.training
    assert (t.world_size, t.dp, t.edp, t.experts_per_rank) == (8, 8, 1, 64)
    assert t.sequence_parallel is False
    assert [(s.layers, s.mamba, s.moe, s.attention) for s in t.stages] == [(4, 1, 2, 1)]
    assert (d.rollout.engines, d.rollout.nodes_per_engine, d.rollout.attn_tp) == (1, 1, 4)
    assert d.memory.params_per_gpu_max_b == pytest.approx(5.803, abs=5e-4)


# Memory per GPU and node, worked out by hand for the full model and the 4-layer slice:
# (memory field, preset, value, tolerance); model_params_b is the whole model's size.
MEMORY = [
    ("weights_gb_per_gpu", FULL, 11.10, 0.01),
    ("grads_gb_per_gpu", FULL, 22.20, 0.01),
    ("weights_grads_gb_per_gpu", FULL, 33.3, 0.05),
    ("host_adam_gb_per_gpu", FULL, 52.9, 0.05),
    ("host_adam_gb_per_node", FULL, 423, 0.5),
    ("host_grad_copies_gb_per_gpu", FULL, 17.6, 0.05),
    ("model_params_b", FULL, 549.31, 0.01),
    ("weights_gb_per_gpu", SLICE, 11.61, 0.01),
    ("grads_gb_per_gpu", SLICE, 23.21, 0.01),
    ("weights_grads_gb_per_gpu", SLICE, 34.8, 0.05),
    ("host_adam_gb_per_gpu", SLICE, 36.9, 0.05),
    ("host_adam_gb_per_node", SLICE, 295, 0.5),
    ("host_grad_copies_gb_per_gpu", SLICE, 12.3, 0.05),
    ("model_params_b", SLICE, 24.59, 0.01),
]


@pytest.mark.parametrize(
    ("key", "preset", "value", "tol"), MEMORY, ids=[f"{m[1][-6:]}-{m[0]}" for m in MEMORY]
)
def test_derive_memory_matches_the_documented_figures(
    key: str, preset: str, value: float, tol: float
) -> None:
    d = layout_figures(make(preset))
    got = d.model_params_b if key == "model_params_b" else getattr(d.memory, key)
    assert got == pytest.approx(value, abs=tol)


def test_derive_without_offload_puts_adam_in_hbm() -> None:
    m = layout_figures(make(FULL, {"optimizer.cpu_offload": False})).memory
    assert m.optimizer_location == "gpu" and m.host_adam_gb_per_node == 0.0
    assert m.train_hbm_gb_per_gpu == pytest.approx(
        33.3 + 52.9, abs=0.1
    )  # weights + grads + Adam states: ≈ 86 GB


def test_derive_with_kept_mtp_grows_the_last_stage_only() -> None:
    base = layout_figures(make(FULL)).memory.params_per_gpu
    kept = layout_figures(make(FULL, {"run.extra_env": KEEP})).memory.params_per_gpu
    assert kept[:3] == base[:3] and kept[3] > base[3]


def test_derive_uneven_layout_still_answers() -> None:
    d = layout_figures(make(FULL, {"train.pp": 5, "cluster.nodes": 15, "rollout.dp": 3}))
    assert LayoutFigures.from_json(json.loads(json.dumps(d.to_json()))) == d
    assert d.training.dp == 3 and d.training.edp is None and d.rollout.attn_tp is None
    assert sum(s.layers for s in d.training.stages) == 105  # the fork's floor split drops 3 layers


def test_derive_json_keeps_the_flat_names_of_plan_json() -> None:
    """`plan --json` and the plan preview carry the figures under one flat name each, stages as rows."""
    j = layout_figures(make(FULL)).to_json()
    assert list(j)[:9] == [
        "world_size",
        "dp",
        "edp",
        "etp",
        "sequence_parallel",
        "experts_per_rank",
        "layers_per_stage",
        "stages",
        "ep_group_nodes",
    ]
    assert len(j) == 33 and j["rollout_engines"] == 4 and j["optimizer_location"] == "host"
    assert j["stages"][0] == {
        "stage": 0,
        "first_layer": 0,
        "layers": 27,
        "M": 12,
        "E": 12,
        "*": 3,
        "-": 0,
        "params_per_gpu_b": 5.55,
    }


# --------------------------------------------------------------------------- legal values


def error_free(spec: RunSpec, field: str, values: range | list[int]) -> list[int]:
    """Values of one dotted field (others unchanged) that leave no error finding naming that field."""
    section, _, name = field.partition(".")
    part = getattr(spec, section)
    out = []
    for v in values:
        edited = spec.model_copy(update={section: part.model_copy(update={name: v})})
        if not any(f.severity == "error" and field in f.fields for f in check(edited)):
            out.append(v)
    return out


def test_legal_values_for_tp_and_pp() -> None:
    spec = make(FULL)
    assert error_free(spec, "train.tp", range(1, 17)) == [1, 2, 4, 8]
    assert error_free(spec, "train.pp", range(1, 10)) == [1, 2, 4]
    assert error_free(spec, "rollout.dp", [1, 2, 3, 4, 8]) == [4, 8]
