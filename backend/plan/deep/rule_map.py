"""A real library's verdict in our catalog's terms, as data: which error text means which rule, what a
passing check proves, which library ids are the same condition as one of ours, and the fix to name."""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.plan.spec import RunSpec

# (check, pattern, rule). First match wins, so the more specific pattern comes first.
ERROR_RULES: tuple[tuple[str, str, str], ...] = (
    ("initialize_model_parallel", r"expert_tensor_model_pipeline_parallel", "A2"),
    ("initialize_model_parallel", r"world_size \(\d+\) is not divisible by", "A1"),
    ("initialize_model_parallel", r"greater than 1 with interleaved schedule", "A8"),
    ("initialize_model_parallel", r"data parallel size of the attention and moe layers", "A4"),
    ("initialize_model_parallel", r"Both EP and CP > 1", "A5"),
    (
        "transformer_config",
        r"num_attention_heads \(\d+\) must be a multiple of tensor_model_parallel_size",
        "B1",
    ),
    ("transformer_config", r"num_query_groups \(\d+\) must be a multiple or divisor", "B2"),
    ("transformer_config", r"sequence parallelism without tensor parallelism", "B3"),
    ("transformer_config", r"pipeline_dtype must be specified", "B5"),
    ("transformer_config", r"num_moe_experts must be non None", "B6"),
    (
        "transformer_config",
        (
            r"middle stage|middle pipeline rank|at first stage|at last "
            r"stage|first_pipeline_stage|last_pipeline_stage|middle layers|Mismatch"
        ),
        "B7",
    ),
    ("transformer_config", r"moe_shared_expert_overlap only works", "B10"),
    ("transformer_config", r"Bias in Moe", "B12"),
    ("transformer_config", r"moe_router_num_groups|moe_router_group_topk", "B13"),
    ("transformer_config", r"recompute", "B14"),
    ("transformer_config", r"virtual pipeline|pipeline model parallel size should be greater than 1", "A8"),
    ("validate_args", r"is not divisible by total_model_size", "C1"),
    ("validate_args", r"Number of layers should be divisible by the pipeline-model-parallel size", "C2"),
    (
        "validate_args",
        r"interleaved schedule is used, pipeline-model-parallel size should be greater than 1",
        "A8",
    ),
    ("validate_args", r"divisible number of layers per virtual pipeline stage|greater than 2", "C3"),
    ("validate_args", r"Number of experts should be a multiple of expert", "C4"),
    ("validate_args", r"latent projection dimension", "C6"),
    ("validate_args", r"eval_global_batch_size", "C7"),
    ("validate_args", r"global batch size \(\d+\) is not divisible by micro batch size", "C8"),
    ("validate_args", r"Multi-Token Prediction", "C10"),
    ("validate_args", r"CUDA_DEVICE_MAX_CONNECTIONS", "C11"),
    ("validate_args", r"recompute", "B14"),
    ("validate_args", r"attention heads|num_attention_heads", "B1"),
    ("validate_args", r"expert_tensor_parallel_size|Bias in Moe", "B12"),
    ("microbatches", r"is not divisible by micro batch size", "C8"),
    ("select_pipeline_segment", r"when no pipe separators", "C2"),
    ("select_pipeline_segment", r"Middle layers", "B7"),
    ("select_pipeline_segment", r"Virtual pipeline parallelism", "D7"),
    ("select_pipeline_segment", r"pipe-delimited segments", "D8"),
    ("server_args", r"expert parallel size must be 1 or the same as the tensor parallel size", "G6"),
    ("server_args", r"tp_size must be divisible by number of nodes", "G4"),
    ("server_args", r"multi-node data.parallel", "G3"),
    ("server_args", r"moe_dense_tp_size", "G5"),
    ("server_args", r"attn-cp-size|triton attention backend", "G7"),
    ("server_args", r"ep_size \* moe_dp_size|moe_dp", "G8"),
    (
        "server_args",
        (
            r"@parallel_hook\.py:\d+ assert .*tp_size % "
            r".*dp_size|@server_args\.py:\d+ assert .*tp_size % .*dp_size"
        ),
        "G1",
    ),
)


# What a passing check proves: the rules whose condition the library's code path evaluates for this
# spec. Only those verdicts are compared (e.g. 0.19.2's validate_args skips the layers % PP check when a
# virtual pipeline is given, so it decides nothing about C2 then).


def effective_vpp(spec: RunSpec) -> int | None:
    """What the model-building checks see: miles' validate_args turns a virtual pipeline of 1 into None."""
    vpp = spec.train.vpp
    return vpp if vpp is not None and vpp > 1 else None


def decides(check: str, spec: RunSpec) -> tuple[str, ...]:
    """The rules a passing `check` proves hold for `spec`."""
    t = spec.train
    edges = (t.decoder_first_pipeline_num_layers is not None) + (
        t.decoder_last_pipeline_num_layers is not None
    )
    decided = _DECIDES.get(check)
    return decided(_Layout(t.pp, edges, effective_vpp(spec) is not None)) if decided else ()


@dataclass(frozen=True, slots=True)
class _Layout:
    """What decides which rules a check proves: PP, how many edge stages are sized by hand, interleaving."""

    pp: int
    edges: int  # 0-2: decoder_first/last_pipeline_num_layers set
    vpp: bool

    @property
    def uneven(self) -> bool:
        return self.edges > 0


def _segment_rules(x: _Layout) -> tuple[str, ...]:
    """select_pipeline_segment: with no middle stage it only slices, checking nothing."""
    if x.pp == 1:
        return ()
    if x.vpp:
        return ("D7",)
    if not x.uneven:
        return ("C2",)
    return ("B7",) if x.pp - x.edges > 0 else ()


_DECIDES: dict[str, Callable[[_Layout], tuple[str, ...]]] = {
    "transformer_config": lambda x: ("B1", "B2", "B13", "B14") + (("B7",) if x.uneven else ()),
    "initialize_model_parallel": lambda x: ("A1", "A2") + (("A8",) if x.vpp else ()),
    "validate_args": lambda x: (
        ("A1", "C4", "C8") + (("A8",) if x.vpp else ()) + (("C2",) if not x.vpp and not x.uneven else ())
    ),
    "microbatches": lambda x: ("C8",),
    "select_pipeline_segment": _segment_rules,
    "server_args": lambda x: ("G1", "G4", "G6"),
}


# A library rule -> our engine's id for the same condition (the catalog marks these "covered").
SAME_AS: dict[str, str] = {
    "C1": "A1",
    "B3": "C5",
    "D6": "D5",
    "D8": "C2",
    "D9": "D7",
    "E1": "C4",
    "G3": "H2",
    "C7": "C8",
}


# The fix a deep finding names, by our rule id.
FIX: dict[str, str] = {
    "A1": "make nodes x gpus_per_node a multiple of TP x PP x CP",
    "A2": "make nodes x gpus_per_node a multiple of ETP x EP x PP (set train.etp explicitly)",
    "A8": "unset train.vpp or use PP > 1",
    "B1": "pick a TP that divides model.num_attention_heads",
    "B2": "pick a TP that divides or is divided by model.num_query_groups",
    "B7": "make the middle stages get equal whole layer counts",
    "B13": "make num_experts divisible by n_group and topk_group <= n_group",
    "B14": "use recompute full + uniform/block with recompute_num_layers within one stage",
    "C2": "pick a PP that divides model.num_layers",
    "C3": "layers per stage must divide by the virtual stage size",
    "C4": "pick an EP that divides model.num_experts",
    "C8": "make global_batch_size a multiple of micro_batch_size x DP",
    "G1": "make rollout.dp divide rollout.gpus_per_engine",
    "G4": "make an engine span whole nodes",
    "G6": "set rollout.ep to 1 or to rollout.gpus_per_engine",
}


def rule_for(check: str, text: str) -> str | None:
    """The rule id a check's error text maps to (first matching pattern), or None."""
    for name, pattern, rule in ERROR_RULES:
        if name == check and re.search(pattern, text):
            return rule
    return None


def error_text(err: BaseException) -> str:
    """The exception's message; for a bare assert, where it fired and the asserted source line."""
    text = " ".join(str(err).split())
    if text:
        return f"{type(err).__name__}: {text}"
    frames = traceback.extract_tb(err.__traceback__)
    if frames:
        last = frames[-1]
        return (
            f"{type(err).__name__} @{os.path.basename(last.filename)}:{last.lineno} "
            f"{(last.line or '').strip()}"
        )
    return type(err).__name__
