"""`plan --deep`: run the real Megatron and SGLang checks on a spec and compare with our rule engine.

Our engine (backend.plan.checks) re-derives every rule arithmetically; this module asks the libraries
themselves where they are importable (miles' image on the head, or the CPU oracle venv the tests
build): `TransformerConfig`, `initialize_model_parallel` over the whole world on a fake process group,
Megatron's own `parse_args` + `validate_args` on the argv the console would submit, the hybrid
pipeline split `select_pipeline_segment`, and SGLang `ServerArgs` for one rollout engine. Each failure
is mapped to a catalog rule id (backend.plan.catalog); a rule whose verdict differs between the library and
our engine is a disagreement.

Only process-local state is touched (a fake torch.distributed group, torch.cuda capability probes),
and all of it is restored afterwards. Nothing here is imported unless `--deep` is asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from backend.plan.spec import RunSpec
from shim.check import quiet

REQUIRED_MODULES = ("megatron.core", "megatron.training", "sglang")

# --------------------------------------------------------------------------- result types


@dataclass(frozen=True)
class DeepFinding:
    """A failure of a real library check, in the shape of backend.plan.checks.Finding."""

    rule: str
    severity: str
    fields: tuple[str, ...]
    message: str
    fix: str
    check: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "fields": list(self.fields),
                "message": self.message, "fix": self.fix, "check": self.check}


@dataclass(frozen=True)
class CheckRun:
    """One real-library check: which rules its pass decides, and how it ended."""

    name: str
    decides: tuple[str, ...]
    ok: bool
    rule: str | None = None
    error: str | None = None
    seconds: float = 0.0
    skipped: str | None = None  # the installed library version lacks this entry point

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "decides": list(self.decides), "ok": self.ok, "rule": self.rule,
                "error": self.error, "seconds": round(self.seconds, 3), "skipped": self.skipped}


@dataclass(frozen=True)
class Disagreement:
    rule: str
    ours: str  # "error" or "ok"
    theirs: str
    check: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "ours": self.ours, "theirs": self.theirs, "check": self.check,
                "detail": self.detail}


@dataclass
class DeepReport:
    available: bool
    unavailable: str | None = None
    findings: list[DeepFinding] = field(default_factory=list)
    checks: list[CheckRun] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.available and not self.findings and not self.disagreements

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, "unavailable": self.unavailable, "message": self.unavailable,
                "ok": self.ok,
                "versions": self.versions, "findings": [f.to_json() for f in self.findings],
                "checks": [c.to_json() for c in self.checks],
                "disagreements": [d.to_json() for d in self.disagreements]}

    def lines(self) -> list[str]:
        """Plain one-line-per-item text for the CLI."""
        if not self.available:
            return [f"deep: {self.unavailable}"]
        out = [f"deep: {c.name}: " + (f"skipped ({c.skipped})" if c.skipped else "ok" if c.ok
                                      else f"FAILED [{c.rule or '?'}] {c.error}")
               for c in self.checks]
        out += [f"deep: DISAGREEMENT on {d.rule}: ours {d.ours}, {d.check} {d.theirs} ({d.detail})"
                for d in self.disagreements]
        return out


# --------------------------------------------------------------------------- availability


def unavailable_reason() -> str | None:
    """None when the libraries import; else the one line `plan --deep` prints."""
    missing = []
    for name in REQUIRED_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if missing:
        return (f"real-library checks skipped: {', '.join(missing)} not importable here "
                "(they are in miles' image; tests build them with tests/deep/build_env.sh)")
    return None


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("megatron-core", "megatron-bridge", "sglang", "torch"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


# --------------------------------------------------------------------------- error text -> rule id
# (check, pattern, rule). First match wins, so the more specific pattern comes first.

ERROR_RULES: tuple[tuple[str, str, str], ...] = (
    ("initialize_model_parallel", r"expert_tensor_model_pipeline_parallel", "A2"),
    ("initialize_model_parallel", r"world_size \(\d+\) is not divisible by", "A1"),
    ("initialize_model_parallel", r"greater than 1 with interleaved schedule", "A8"),
    ("initialize_model_parallel", r"data parallel size of the attention and moe layers", "A4"),
    ("initialize_model_parallel", r"Both EP and CP > 1", "A5"),
    ("transformer_config", r"num_attention_heads \(\d+\) must be a multiple of tensor_model_parallel_size", "B1"),
    ("transformer_config", r"num_query_groups \(\d+\) must be a multiple or divisor", "B2"),
    ("transformer_config", r"sequence parallelism without tensor parallelism", "B3"),
    ("transformer_config", r"pipeline_dtype must be specified", "B5"),
    ("transformer_config", r"num_moe_experts must be non None", "B6"),
    ("transformer_config", r"middle stage|middle pipeline rank|at first stage|at last stage|first_pipeline_stage|last_pipeline_stage|middle layers|Mismatch",
     "B7"),
    ("transformer_config", r"moe_shared_expert_overlap only works", "B10"),
    ("transformer_config", r"Bias in Moe", "B12"),
    ("transformer_config", r"moe_router_num_groups|moe_router_group_topk", "B13"),
    ("transformer_config", r"recompute", "B14"),
    ("transformer_config", r"virtual pipeline|pipeline model parallel size should be greater than 1", "A8"),
    ("validate_args", r"is not divisible by total_model_size", "C1"),
    ("validate_args", r"Number of layers should be divisible by the pipeline-model-parallel size", "C2"),
    ("validate_args", r"interleaved schedule is used, pipeline-model-parallel size should be greater than 1", "A8"),
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
    ("server_args", r"@parallel_hook\.py:\d+ assert .*tp_size % .*dp_size|@server_args\.py:\d+ assert .*tp_size % .*dp_size",
     "G1"),
)

# What a passing check proves: the rules whose condition the library's code path evaluates for this
# spec. Only those verdicts are compared (e.g. 0.19.2's validate_args skips the layers % PP check when a
# virtual pipeline is given, so it decides nothing about C2 then).


def effective_vpp(spec: RunSpec) -> int | None:
    """What the model-building checks see: miles' validate_args turns a virtual pipeline of 1 into None."""
    vpp = spec.train.vpp
    return vpp if vpp is not None and vpp > 1 else None


def decides(check: str, spec: RunSpec) -> tuple[str, ...]:
    t = spec.train
    uneven = t.decoder_first_pipeline_num_layers is not None or t.decoder_last_pipeline_num_layers is not None
    vpp = effective_vpp(spec) is not None
    if check == "transformer_config":
        return ("B1", "B2", "B13", "B14") + (("B7",) if uneven else ())
    if check == "initialize_model_parallel":
        return ("A1", "A2") + (("A8",) if vpp else ())
    if check == "validate_args":
        return ("A1", "C4", "C8") + (("A8",) if vpp else ()) + (("C2",) if not vpp and not uneven else ())
    if check == "microbatches":
        return ("C8",)
    if check == "select_pipeline_segment":
        if t.pp == 1:
            return ()
        if vpp:
            return ("D7",)
        if not uneven:
            return ("C2",)
        middle = t.pp - (t.decoder_first_pipeline_num_layers is not None) - (t.decoder_last_pipeline_num_layers is not None)
        return ("B7",) if middle > 0 else ()  # with no middle stage it only slices, checking nothing
    if check == "server_args":
        return ("G1", "G4", "G6")
    return ()


# Library rule -> our engine's id for the same condition (backend.plan.catalog marks these "covered").
SAME_AS: dict[str, str] = {"C1": "A1", "B3": "C5", "D6": "D5", "D8": "C2", "D9": "D7", "E1": "C4",
                           "G3": "H2", "C7": "C8"}

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
    for name, pattern, rule in ERROR_RULES:
        if name == check and re.search(pattern, text):
            return rule
    return None


def _error_text(err: BaseException) -> str:
    """The exception's message; for a bare assert, where it fired and the asserted source line."""
    text = " ".join(str(err).split())
    if text:
        return f"{type(err).__name__}: {text}"
    frames = traceback.extract_tb(err.__traceback__)
    if frames:
        last = frames[-1]
        return f"{type(err).__name__} @{os.path.basename(last.filename)}:{last.lineno} {(last.line or '').strip()}"
    return type(err).__name__


# --------------------------------------------------------------------------- process-local patches


@contextlib.contextmanager
def _hopper_gpu(env: dict[str, str]) -> Iterator[None]:
    """validate_args asks torch.cuda about the GPU and reads env vars: answer as an H200 node would."""
    import torch

    class _Props:
        major, minor, name = 9, 0, "NVIDIA H200"
        total_memory = 141 * 1024**3

    saved = (torch.cuda.get_device_capability, torch.cuda.get_device_properties)
    saved_env = {k: os.environ.get(k) for k in env}
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: _Props()
    os.environ.update(env)
    try:
        yield
    finally:
        torch.cuda.get_device_capability, torch.cuda.get_device_properties = saved
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _fake_world(world: int, rank: int = 0) -> Iterator[None]:
    """A fake torch.distributed world of `world` ranks in this process (no communication happens)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------- the checks


def _keep_mtp(spec: RunSpec) -> bool:
    return bool(spec.run.extra_env.get("MILES_NEMOTRONH_KEEP_MTP"))


def check_transformer_config(spec: RunSpec) -> None:
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    m, t = spec.model, spec.train
    kwargs: dict[str, Any] = dict(
        num_layers=m.num_layers, hidden_size=m.hidden_size, num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups, kv_channels=m.kv_channels, ffn_hidden_size=m.ffn_hidden_size,
        tensor_model_parallel_size=t.tp, pipeline_model_parallel_size=t.pp, context_parallel_size=t.cp,
        expert_model_parallel_size=t.ep, expert_tensor_parallel_size=t.etp,
        virtual_pipeline_model_parallel_size=effective_vpp(spec),
        # miles runs validate_args first, which turns SP off at TP=1 (C5) before any config sees it.
        sequence_parallel=spec.sequence_parallel and t.tp > 1,
        pipeline_dtype=torch.bfloat16 if t.pp > 1 else None, params_dtype=torch.bfloat16, bf16=True,
        add_bias_linear=m.add_bias_linear, normalization=m.normalization,
        num_moe_experts=m.num_experts, moe_router_topk=m.moe_router_topk,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=m.shared_expert_intermediate_size or None,
        moe_latent_size=m.moe_latent_size, moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True, moe_router_topk_scaling_factor=m.routed_scaling_factor,
        moe_router_num_groups=m.n_group, moe_router_group_topk=m.topk_group,
        moe_shared_expert_overlap=t.moe_shared_expert_overlap, moe_token_dispatcher_type=t.moe_token_dispatcher,
        recompute_granularity=t.recompute_granularity, recompute_method=t.recompute_method,
        recompute_num_layers=t.recompute_num_layers,
        num_layers_in_first_pipeline_stage=t.decoder_first_pipeline_num_layers,
        num_layers_in_last_pipeline_stage=t.decoder_last_pipeline_num_layers,
        mamba_num_heads=m.mamba_num_heads, mamba_head_dim=m.mamba_head_dim,
        mamba_num_groups=m.mamba_num_groups, mamba_state_dim=m.mamba_state_dim,
        mtp_num_layers=(m.mtp_num_layers or None) if _keep_mtp(spec) else None,
    )
    known = {f.name for f in dataclasses.fields(TransformerConfig)}
    TransformerConfig(**{k: v for k, v in kwargs.items() if k in known})  # older cores lack some fields


def check_initialize_model_parallel(spec: RunSpec) -> None:
    from megatron.core import parallel_state

    t = spec.train
    with _fake_world(spec.cluster.total_gpus):
        try:
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=t.tp, pipeline_model_parallel_size=t.pp,
                virtual_pipeline_model_parallel_size=effective_vpp(spec), context_parallel_size=t.cp,
                expert_model_parallel_size=t.ep, expert_tensor_parallel_size=t.etp,
                create_gloo_process_groups=False,
            )
        finally:
            parallel_state.destroy_model_parallel()


def megatron_argv(spec: RunSpec) -> list[str]:
    """The argv the console submits (miles' flags included: Megatron's parser ignores what it lacks)."""
    from backend.plan.submission import build_submission

    argv = build_submission(spec, run_id="000000-000000-000", nvlink=False, with_shim=False).argv
    if argv and argv[0].endswith("python3"):
        argv = argv[2:]  # "python3 /path/train.py"
    extra = []
    if "--seq-length" not in argv:
        extra += ["--seq-length", "4096", "--max-position-embeddings", "4096"]
    if "--micro-batch-size" not in argv:
        extra += ["--micro-batch-size", str(spec.train.micro_batch_size)]
    if "--bf16" not in argv:
        extra += ["--bf16"]
    return argv + extra


_PARSERS: dict[str, Any] = {}


@contextlib.contextmanager
def _reused_parser(arguments: Any) -> Iterator[None]:
    """Megatron rebuilds its ~1000-option parser (re-reading its own source for help texts) on every
    parse_args, about 0.2 s; the parser is stateless between parses, so build it once."""
    original = arguments.add_megatron_arguments

    def cached(parser: Any) -> Any:
        if "megatron" not in _PARSERS:
            _PARSERS["megatron"] = original(parser)
        return _PARSERS["megatron"]

    arguments.add_megatron_arguments = cached
    try:
        yield
    finally:
        arguments.add_megatron_arguments = original


def check_validate_args(spec: RunSpec) -> None:
    from megatron.training import arguments

    env = {"CUDA_DEVICE_MAX_CONNECTIONS": spec.run.extra_env.get("CUDA_DEVICE_MAX_CONNECTIONS", "1")}
    saved_argv = sys.argv
    sys.argv = ["train.py", *megatron_argv(spec)]
    try:
        with _hopper_gpu(env), _reused_parser(arguments):
            args = arguments.parse_args(ignore_unknown_args=True)
            args.world_size = spec.cluster.total_gpus
            args.rank = 0
            arguments.validate_args(args, {})
    finally:
        sys.argv = saved_argv


def check_microbatches(spec: RunSpec) -> None:
    from megatron.core import num_microbatches_calculator as nmc

    t = spec.train
    dp = spec.cluster.total_gpus // (t.tp * t.pp * t.cp)
    if dp == 0 or spec.cluster.total_gpus % (t.tp * t.pp * t.cp):
        return  # A1 decides this spec; the calculator needs a whole DP
    nmc.init_num_microbatches_calculator(0, None, spec.batch.global_batch_size, t.micro_batch_size, dp, False)
    nmc.destroy_num_microbatches_calculator()


def check_select_pipeline_segment(spec: RunSpec) -> None:
    from megatron.core import parallel_state
    from megatron.core.models.hybrid.hybrid_layer_allocation import select_pipeline_segment

    t = spec.train
    with _fake_world(t.pp):
        parallel_state.initialize_model_parallel(pipeline_model_parallel_size=t.pp, create_gloo_process_groups=False)
        try:
            select_pipeline_segment(
                spec.model.hybrid_pattern, parallel_state.get_pipeline_model_parallel_group() if t.pp > 1 else None,
                0 if effective_vpp(spec) else None, t.decoder_first_pipeline_num_layers, t.decoder_last_pipeline_num_layers,
                tp_group=parallel_state.get_tensor_model_parallel_group(),
                dp_cp_group=parallel_state.get_data_parallel_group(with_context_parallel=True),
            )
        finally:
            parallel_state.destroy_model_parallel()


def hf_config(spec: RunSpec) -> dict[str, Any]:
    """A synthetic NemotronH config.json for the spec's model (what SGLang and the Bridge read)."""
    m = spec.model
    return {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
        "hidden_size": m.hidden_size, "num_hidden_layers": m.num_layers,
        "hybrid_override_pattern": m.hybrid_pattern, "num_attention_heads": m.num_attention_heads,
        "num_key_value_heads": m.num_query_groups, "head_dim": m.kv_channels,
        "intermediate_size": m.ffn_hidden_size, "moe_intermediate_size": m.moe_ffn_hidden_size,
        "moe_shared_expert_intermediate_size": m.shared_expert_intermediate_size,
        "n_shared_experts": 1 if m.shared_expert_intermediate_size else 0,
        "n_routed_experts": m.num_experts, "num_experts_per_tok": m.moe_router_topk,
        "moe_latent_size": m.moe_latent_size, "routed_scaling_factor": m.routed_scaling_factor,
        "n_group": m.n_group, "topk_group": m.topk_group, "mamba_num_heads": m.mamba_num_heads,
        "mamba_head_dim": m.mamba_head_dim, "n_groups": m.mamba_num_groups, "ssm_state_size": m.mamba_state_dim,
        "conv_kernel": m.mamba_conv_kernel, "vocab_size": m.vocab_size,
        "tie_word_embeddings": not m.untie_embeddings, "max_position_embeddings": 4096,
        "num_nextn_predict_layers": m.mtp_num_layers, "mtp_hybrid_override_pattern": m.mtp_pattern,
        "torch_dtype": "bfloat16",
    }


def check_server_args(spec: RunSpec) -> None:
    from sglang.srt.server_args import ServerArgs

    r, c = spec.rollout, spec.cluster
    with tempfile.TemporaryDirectory(prefix="ultra-console-deep-") as model_dir:
        with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(hf_config(spec), fh)
        kwargs: dict[str, Any] = dict(
            model_path=model_dir, skip_tokenizer_init=True, tp_size=r.gpus_per_engine, ep_size=r.ep,
            dp_size=r.dp, enable_dp_attention=r.enable_dp_attention,
            nnodes=max(1, -(-r.gpus_per_engine // c.gpus_per_node)), node_rank=0,
            mem_fraction_static=r.mem_fraction, trust_remote_code=False,
            # CPU stand-ins for what an H200 engine would pick (constraints.md §4).
            device="cpu", mamba_radix_cache_strategy="no_buffer", disable_overlap_schedule=True, page_size=1,
        )
        if r.sglang_attention_backend:
            kwargs["attention_backend"] = r.sglang_attention_backend
        args = ServerArgs(**kwargs)
        args.resolve_once()
        args.check_server_args()


CHECKS: tuple[tuple[str, Callable[[RunSpec], None]], ...] = (
    ("transformer_config", check_transformer_config),
    ("initialize_model_parallel", check_initialize_model_parallel),
    ("validate_args", check_validate_args),
    ("microbatches", check_microbatches),
    ("select_pipeline_segment", check_select_pipeline_segment),
    ("server_args", check_server_args),
)


def _fields_of(rule: str) -> tuple[str, ...]:
    from backend.plan.catalog import RULES

    found = RULES.get(SAME_AS.get(rule, rule))
    return found.fields if found else ()


def run_one(name: str, fn: Callable[[RunSpec], None], spec: RunSpec) -> CheckRun:
    start = time.perf_counter()
    try:
        with quiet():
            fn(spec)
    except ImportError as err:  # e.g. select_pipeline_segment is new in core 0.17; the fork has none
        return CheckRun(name, (), True, seconds=time.perf_counter() - start,
                        skipped=f"not in the installed version: {err}")
    except Exception as err:  # the library's verdict: map it, never let it escape
        text = _error_text(err)
        return CheckRun(name, decides(name, spec), False, rule_for(name, text), text, time.perf_counter() - start)
    except SystemExit as err:  # argparse inside parse_args exits on an argv it cannot read
        text = f"SystemExit({err.code}) from the argument parser"
        return CheckRun(name, decides(name, spec), False, None, text, time.perf_counter() - start)
    return CheckRun(name, decides(name, spec), True, seconds=time.perf_counter() - start)


def _our_errors(findings: list[Any]) -> set[str]:
    return {f.rule for f in findings if getattr(f, "severity", None) == "error"}


def compare(checks: list[CheckRun], ours: list[Any]) -> list[Disagreement]:
    """Rules both sides decide, with different verdicts."""
    errors = _our_errors(ours)
    out: list[Disagreement] = []
    seen: set[tuple[str, str]] = set()
    for run in checks:
        if run.ok:
            for rule in run.decides:
                if rule in errors and (rule, run.name) not in seen:
                    seen.add((rule, run.name))
                    out.append(Disagreement(rule, "error", "ok", run.name, f"{run.name} accepts this layout"))
            continue
        if run.rule is None:
            out.append(Disagreement("?", "ok" if not errors else "error", "error", run.name,
                                    f"unmapped failure: {run.error}"))
            continue
        ours_id = SAME_AS.get(run.rule, run.rule)
        if ours_id not in errors:
            out.append(Disagreement(ours_id, "ok", "error", run.name, run.error or ""))
    return out


def run_deep_checks(spec: RunSpec, *, ours: list[Any] | None = None) -> DeepReport:
    """Run every real-library check on `spec`; `ours` defaults to backend.plan.checks.check(spec)."""
    reason = unavailable_reason()
    if reason:
        return DeepReport(available=False, unavailable=reason)
    if ours is None:
        from backend.plan.checks import check

        ours = check(spec)
    runs = [run_one(name, fn, spec) for name, fn in CHECKS]
    findings = [
        DeepFinding(SAME_AS.get(r.rule, r.rule) if r.rule else "?", "error",
                    _fields_of(r.rule) if r.rule else (), f"{r.name}: {r.error}",
                    FIX.get(SAME_AS.get(r.rule, r.rule) if r.rule else "", "see the library's message"), r.name)
        for r in runs if not r.ok
    ]
    return DeepReport(available=True, findings=findings, checks=runs, disagreements=compare(runs, ours),
                      versions=_versions())
