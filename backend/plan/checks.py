"""The layout rule engine: `check(spec)` gives findings, `derive(spec)` the numbers a layout implies.

Every rule of constraints.md §2 that the spec can decide is checked here, under its catalog id
(`backend.plan.catalog.RULES` holds the catalog as data: title, fields, source, status). Section M (M1–M3) is
ultra-console's own: the §5 memory estimates (training HBM, offloaded-Adam host RAM, rollout weights) as
checks. Rules that need a runtime, a flag the recipe never passes or a value the spec cannot hold are in the
catalog with status "n/a"/"covered" and never fire.

Verdicts follow what the real stack (miles → Megatron fork → SGLang) does with the layout, in the order it
runs: hard failures are errors; silent corrections (SP dropped at TP=1, colocate overriding rollout GPUs, an
unset ETP defaulting to TP) are warnings; launcher-script restrictions that train.py itself accepts are info,
because ultra-console submits train.py directly. Model-construction checks that have no CPU entry point
(E2, E4, G9–G12) are re-derived arithmetically.

Speed matters (the plan form re-checks on every keystroke): one pass reads the spec into a slotted context,
pattern counts are cached, and no pydantic validation runs in here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from math import gcd
from typing import Any

from backend.plan import sizing
from backend.plan.catalog import CHECKED, ORDER, RULES, SEVERITY_RANK, Rule
from backend.plan.finding import Finding, has_errors
from backend.plan.spec import RunSpec

__all__ = ["CHECKED", "RULES", "Finding", "Rule", "check", "derive", "has_errors", "legal_values"]

KEEP_MTP_ENV = "MILES_NEMOTRONH_KEEP_MTP"
WARN_FRACTION = 0.8  # memory use above this share of a budget is a warning (too little headroom)
MTP_SYMBOLS = frozenset("MG*D+-E")




# --------------------------------------------------------------------------- small helpers

@lru_cache(maxsize=512)
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0) if n > 0 else ()


def _near(values: Iterable[int], current: int, k: int = 4) -> list[int]:
    """Up to k legal values closest to the current one (ascending)."""
    return sorted(sorted(set(values), key=lambda v: (abs(v - current), v))[:k])


def _alts(values: Iterable[Any]) -> str:
    vals = [str(v) for v in values]
    if not vals:
        return "(none)"
    return vals[0] if len(vals) == 1 else ", ".join(vals[:-1]) + " or " + vals[-1]


def _gb(x: float) -> str:
    return f"{x:.1f} GB"


@lru_cache(maxsize=64)
def _counts(pattern: str) -> tuple[int, int, int, int]:
    return pattern.count("M"), pattern.count("E"), pattern.count("*"), pattern.count("-")


# --------------------------------------------------------------------------- context

class _Ctx:
    """The spec read once into plain attributes, plus the layout numbers every rule shares."""

    __slots__ = (
        "R",
        "W",
        "attn_tp",
        "bias",
        "cdmc",
        "colocate",
        "cp",
        "dense_grid",
        "dispatcher",
        "dp",
        "dpa",
        "dyn",
        "edp",
        "enable_mtp_flag",
        "ep",
        "etp",
        "etp_raw",
        "expert_grid",
        "experts",
        "extra_args",
        "ffn",
        "first",
        "g",
        "gbs",
        "gpn",
        "groups",
        "has_attn",
        "has_mamba",
        "has_mlp",
        "has_moe",
        "hbm",
        "heads",
        "host_mem",
        "keep_mtp",
        "kv",
        "last",
        "latent",
        "layers",
        "m",
        "m_groups",
        "m_heads",
        "max_tokens",
        "mbs",
        "mem_fraction",
        "moe_ffn",
        "mtp_layers",
        "mtp_pattern",
        "n",
        "n_group",
        "nn",
        "nodes",
        "num_gpus",
        "offload",
        "osb",
        "out",
        "overlap",
        "overlap_p2p",
        "pattern",
        "pos_emb",
        "pp",
        "r_backend",
        "rbs",
        "rdp",
        "rec_gran",
        "rec_method",
        "rec_n",
        "rep",
        "shared",
        "sp",
        "sp_raw",
        "sp_req",
        "spec",
        "steps",
        "topk_group",
        "tp",
        "uneven_args",
        "vpp",
        "vpp_raw",
    )

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.out: list[Finding] = []
        m, c, t, r, b = spec.model, spec.cluster, spec.train, spec.rollout, spec.batch
        self.m = m
        self.nodes, self.gpn = c.nodes, c.gpus_per_node
        self.W = c.nodes * c.gpus_per_node
        self.hbm, self.host_mem = c.gpu_memory_gb, c.host_memory_gb
        self.tp, self.pp, self.cp, self.ep = t.tp, t.pp, t.cp, t.ep
        self.etp_raw = t.etp
        self.etp = t.etp if t.etp is not None else t.tp  # Megatron's validate_args default
        self.vpp_raw = t.vpp
        self.vpp = t.vpp if t.vpp is not None and t.vpp > 1 else None  # validate_args: 1 ⇒ no interleaving
        self.sp_raw = t.sequence_parallel
        self.sp_req = t.tp > 1 if t.sequence_parallel is None else t.sequence_parallel
        self.sp = self.sp_req and t.tp > 1
        self.first, self.last = t.decoder_first_pipeline_num_layers, t.decoder_last_pipeline_num_layers
        # validate_args runs its even-split check (C2) only without these flags
        self.uneven_args = self.first is not None or self.last is not None or t.vpp is not None
        self.rec_gran, self.rec_method, self.rec_n = t.recompute_granularity, t.recompute_method, t.recompute_num_layers
        self.mbs, self.dyn = t.micro_batch_size, t.use_dynamic_batch_size
        self.overlap, self.dispatcher = t.moe_shared_expert_overlap, t.moe_token_dispatcher
        self.layers, self.pattern = m.num_layers, m.hybrid_pattern
        n_m, n_e, n_a, n_d = _counts(m.hybrid_pattern)
        self.has_mamba, self.has_moe, self.has_attn, self.has_mlp = n_m > 0, n_e > 0, n_a > 0, n_d > 0
        self.heads, self.groups, self.kv = m.num_attention_heads, m.num_query_groups, m.kv_channels
        self.ffn, self.moe_ffn, self.shared = m.ffn_hidden_size, m.moe_ffn_hidden_size, m.shared_expert_intermediate_size
        self.experts, self.latent = m.num_experts, m.moe_latent_size
        self.n_group, self.topk_group = m.n_group, m.topk_group
        self.m_heads, self.m_groups = m.mamba_num_heads, m.mamba_num_groups
        self.pos_emb, self.bias = m.position_embedding_type, m.add_bias_linear
        self.mtp_layers, self.mtp_pattern = m.mtp_num_layers, m.mtp_pattern
        env = spec.run.extra_env
        self.keep_mtp = bool(env.get(KEEP_MTP_ENV))
        self.cdmc = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
        self.extra_args = spec.run.extra_args
        flags = spec.run.extra_args.split()
        self.enable_mtp_flag = "--enable-mtp-training" in flags
        self.overlap_p2p = "--no-overlap-p2p-communication" not in flags
        self.offload = spec.optimizer.cpu_offload
        self.g, self.rep, self.rdp, self.dpa = r.gpus_per_engine, r.ep, r.dp, r.enable_dp_attention
        self.mem_fraction, self.num_gpus, self.colocate = r.mem_fraction, r.num_gpus, r.colocate
        self.r_backend = r.sglang_attention_backend
        self.gbs, self.rbs, self.n = b.global_batch_size, b.rollout_batch_size, b.n_samples_per_prompt
        self.steps, self.osb, self.max_tokens = b.num_steps_per_rollout, b.over_sampling_batch_size, b.max_tokens_per_gpu
        # derived layout
        self.dense_grid = self.tp * self.pp * self.cp
        self.dp = self.W // self.dense_grid if self.W % self.dense_grid == 0 else None
        self.expert_grid = self.etp * self.ep * self.pp
        self.edp = self.W // self.expert_grid if self.W % self.expert_grid == 0 else None
        self.R = self.W if self.colocate else self.num_gpus  # H3: colocate forces all actor GPUs
        self.nn = max(1, self.g // self.gpn)  # H4: nodes per engine
        if self.dpa and self.rdp > 1:
            self.attn_tp = self.g // self.rdp if self.g % self.rdp == 0 else None
        else:
            self.attn_tp = self.g

    def add(self, rule: str, message: str, fix: str, fields: tuple[str, ...] | None = None,
            severity: str | None = None) -> None:
        meta = RULES[rule]
        self.out.append(Finding(rule, severity or meta.severities[0], fields or meta.fields, message, fix))  # type: ignore[arg-type]

    # legal-value sets used by fixes -------------------------------------------------------------
    def tp_ok_model(self, v: int) -> bool:
        """TP constraints that come from the model alone (B1, B2, D1, D2)."""
        return (self.heads % v == 0 and (self.groups % v == 0 or v % self.groups == 0)
                and (not self.has_mamba or (self.m_heads % v == 0 and self.m_groups % v == 0)))

    def legal_tp(self) -> list[int]:
        return [v for v in range(1, max(self.heads, 8) + 1) if self.tp_ok_model(v)]

    def legal_pp(self) -> list[int]:
        fits = [p for p in _divisors(self.layers)
                if self.W % (self.tp * p * self.cp) == 0 and self.W % (self.etp * self.ep * p) == 0]
        return fits or list(_divisors(self.layers))

    def legal_ep(self) -> list[int]:
        fits = [e for e in _divisors(self.experts) if self.W % (self.etp * e * self.pp) == 0]
        return fits or list(_divisors(self.experts))

    def attn_tp_ok(self, a: int) -> bool:
        """G9 + G10 for one attention-TP degree."""
        mamba = not self.has_mamba or (self.m_heads % a == 0 and (self.m_groups % a == 0 or self.m_groups == 1))
        if self.groups >= a:
            kv_ok = self.groups % a == 0
        else:
            kv_ok = a % self.groups == 0
        attn = not self.has_attn or (self.heads % a == 0 and kv_ok)
        return mamba and attn

    def legal_rollout_dp(self) -> list[int]:
        """dp values whose attn_tp = g/dp passes G9/G10 (dp > 1 only with dp-attention)."""
        return [d for d in _divisors(self.g) if self.attn_tp_ok(self.g // d) and (d == 1 or self.dpa)]

    def engine_sizes(self, pool: int) -> list[int]:
        """Engine sizes that tile a pool of GPUs on whole nodes (G4/G12/H4)."""
        return [d for d in _divisors(pool) if (d <= self.gpn and self.gpn % d == 0) or d % self.gpn == 0]

    def nodes_fitting(self, grid: int) -> list[int]:
        step = grid // gcd(grid, self.gpn)
        base = max(step, (self.nodes // step) * step)
        return sorted({base, base + step} - {0})


def _world(c: _Ctx) -> str:
    return f"{c.W} GPUs ({c.nodes} nodes × {c.gpn})"


# --------------------------------------------------------------------------- A: process-group grid

def _a1(c: _Ctx) -> None:
    if c.W % c.dense_grid:
        pps = [p for p in _divisors(c.W // (c.tp * c.cp))] if c.W % (c.tp * c.cp) == 0 else []
        alt = f"use train.pp {_alts(_near(pps, c.pp))} at TP={c.tp}, CP={c.cp}, or " if pps else ""
        c.add("A1", f"training grid TP·PP·CP = {c.tp}·{c.pp}·{c.cp} = {c.dense_grid} does not divide the "
              f"{_world(c)}: Megatron raises 'world_size ({c.W}) is not divisible by {c.dense_grid}'",
              f"{alt}use a cluster of {_alts(c.nodes_fitting(c.dense_grid))} nodes")


def _a2(c: _Ctx) -> None:
    if c.W % c.expert_grid:
        unset = f" (train.etp unset, so Megatron uses ETP = TP = {c.tp})" if c.etp_raw is None else ""
        eps = [e for e in _divisors(c.experts) if c.W % (c.etp * e * c.pp) == 0]
        parts = [f"use train.ep {_alts(_near(eps, c.ep))}"] if eps else []
        if c.etp != 1 and c.W % (c.ep * c.pp) == 0:
            parts.append("set train.etp = 1")
        parts.append(f"use a cluster of {_alts(c.nodes_fitting(c.expert_grid))} nodes")
        c.add("A2", f"expert grid ETP·EP·PP = {c.etp}·{c.ep}·{c.pp} = {c.expert_grid} does not divide the "
              f"{_world(c)}{unset}: initialize_model_parallel raises 'world_size ({c.W}) is not divisible by "
              f"expert_tensor_model_pipeline_parallel size ({c.expert_grid})'", "; or ".join(parts))


def _a3(c: _Ctx) -> None:
    if c.etp_raw is None and c.tp > 1 and c.ep > 1:
        c.add("A3", f"train.etp is unset: Megatron's validate_args makes ETP = TP = {c.tp} (Megatron-Bridge would "
              f"use 1), so the expert grid is {c.tp}·{c.ep}·{c.pp} = {c.tp * c.ep * c.pp} GPUs wide and each "
              f"expert's {c.moe_ffn}-wide FFN is split {c.tp} ways",
              "set train.etp = 1 explicitly (the recipe's value)")


def _a8(c: _Ctx) -> None:
    if c.vpp is not None and c.pp <= 1:
        c.add("A8", f"train.vpp = {c.vpp} with PP = {c.pp}: an interleaved schedule needs PP > 1 "
              "('pipeline-model-parallel size should be greater than 1 with interleaved schedule')",
              "unset train.vpp (this hybrid model cannot use VPP at all, see D7)")


# --------------------------------------------------------------------------- B: model-parallel config

def _b1(c: _Ctx) -> None:
    if c.heads % c.tp:
        c.add("B1", f"TP = {c.tp} does not divide the {c.heads} attention heads "
              f"('num_attention_heads ({c.heads}) must be a multiple of tensor_model_parallel_size ({c.tp})')",
              f"use train.tp {_alts(_near(c.legal_tp(), c.tp))}")


def _b2(c: _Ctx) -> None:
    if c.groups % c.tp and c.tp % c.groups:
        c.add("B2", f"TP = {c.tp} is neither a multiple nor a divisor of the {c.groups} GQA query groups",
              f"use train.tp {_alts(_near(c.legal_tp(), c.tp))}")


def _b4(c: _Ctx) -> None:
    if c.has_moe and c.ep > 1 and c.tp > 1 and not c.sp:
        c.add("B4", f"EP = {c.ep} and TP = {c.tp} with sequence parallelism off: Megatron warns at config time "
              "'sequence parallelism must be used' (and the first training step then fails, see E2)",
              "set train.sequence_parallel = true (or leave it unset: on iff TP > 1)")


def _b7(c: _Ctx) -> None:
    """TransformerConfig's uneven-PP arithmetic, step for step (it runs even at PP = 1)."""
    first, last, vpp = c.first, c.last, c.vpp
    if first is None and last is None:
        return
    fields = ("train.decoder_first_pipeline_num_layers", "train.decoder_last_pipeline_num_layers", "train.pp")
    layers, stages = c.layers, c.pp
    for name, val in (("decoder_first_pipeline_num_layers", first), ("decoder_last_pipeline_num_layers", last)):
        if val is None:
            continue
        if val <= 0:
            c.add("B7", f"train.{name} = {val}: a pipeline stage must hold at least one layer",
                  f"set train.{name} to 1..{c.layers - 1} or unset it", fields)
            return
        if vpp is not None and val % vpp:
            c.add("B7", f"train.{name} = {val} is not divisible by the virtual pipeline degree {vpp}",
                  "unset train.vpp (D7)", (*fields, "train.vpp"))
            return
        layers -= val
        stages -= 1
    fix = (f"pick first/last so that {c.layers} − first − last splits evenly over the middle stages, or unset "
           "both (miles' fork ignores them anyway, see D7)")
    what = (f"{c.layers} layers with first stage {first} and last stage {last} leave {layers} layers for "
            f"{stages} middle stage(s) of PP = {c.pp}")
    if bool(layers) != bool(stages):
        c.add("B7", f"{what}: 'Mismatch: {layers} middle layers remaining but {stages} middle PP stages "
              "available'", fix, fields)
    elif stages and layers % stages:
        c.add("B7", f"{what}: they must split evenly", fix, fields)
    elif stages and vpp is not None and (layers // stages) % vpp:
        c.add("B7", f"{what}: {layers // stages} layers per middle stage are not divisible by the virtual "
              f"pipeline degree {vpp}", "unset train.vpp (D7)", (*fields, "train.vpp"))


def _b10(c: _Ctx) -> None:
    if c.dispatcher == "allgather" and c.has_moe:
        c.add("B10", "train.moe_token_dispatcher = 'allgather': miles silently switches it to 'alltoall'",
              "set train.moe_token_dispatcher = \"alltoall\"", ("train.moe_token_dispatcher",), "warning")
    effective = "alltoall" if c.dispatcher == "allgather" else c.dispatcher
    if c.overlap and not c.latent and effective != "alltoall":
        c.add("B10", f"moe_shared_expert_overlap with the '{effective}' dispatcher: miles' Megatron fork only "
              "supports it with 'alltoall'", "set train.moe_token_dispatcher = \"alltoall\" or "
              "train.moe_shared_expert_overlap = false")


def _b11(c: _Ctx) -> None:
    if c.overlap and c.latent:
        c.add("B11", f"moe_shared_expert_overlap = true with latent MoE (moe_latent_size = {c.latent}): miles "
              "forces it off (the fork cannot overlap shared experts with latent projections)",
              "set train.moe_shared_expert_overlap = false")


def _b12(c: _Ctx) -> None:
    if c.has_moe and c.bias and c.etp != 1:
        c.add("B12", f"MoE with bias (model.add_bias_linear) needs ETP = 1, got ETP = {c.etp}"
              + (" (unset ⇒ TP)" if c.etp_raw is None else ""), "set train.etp = 1")


def _b13(c: _Ctx) -> None:
    if not c.has_moe:
        return
    if c.experts % c.n_group:
        c.add("B13", f"{c.experts} experts are not divisible by the {c.n_group} router groups (model.n_group)",
              f"use model.n_group {_alts(_near(_divisors(c.experts), c.n_group))}")
    elif c.topk_group > c.n_group:
        c.add("B13", f"router group top-k {c.topk_group} exceeds the {c.n_group} router groups",
              f"set model.topk_group to 1..{c.n_group}")


def _b14(c: _Ctx) -> None:
    gran, method, n = c.rec_gran, c.rec_method, c.rec_n
    if gran == "full":
        if method is None:
            c.add("B14", "recompute granularity 'full' needs a recompute method",
                  "set train.recompute_method = \"uniform\" (the recipe's) or \"block\"")
        if n is None:
            per = c.layers // c.pp
            c.add("B14", f"recompute granularity 'full' needs recompute_num_layers (1..{per} layers per stage)",
                  "set train.recompute_num_layers = 1 (the recipe's)")
    elif gran == "selective":
        if n is not None:
            c.add("B14", f"recompute granularity 'selective' forbids recompute_num_layers (got {n})",
                  "unset train.recompute_num_layers", ("train.recompute_granularity", "train.recompute_num_layers"))
        if method is not None:
            c.add("B14", f"recompute granularity 'selective' does not take a recompute method (got '{method}')",
                  "unset train.recompute_method", ("train.recompute_granularity", "train.recompute_method"))


# --------------------------------------------------------------------------- C: validate_args

def _c2(c: _Ctx) -> None:
    if not c.uneven_args and c.layers % c.pp:
        c.add("C2", f"{c.layers} layers do not split evenly over PP = {c.pp} "
              "('Number of layers should be divisible by the pipeline-model-parallel size')",
              f"use train.pp {_alts(_near(c.legal_pp(), c.pp))}")


def _c3(c: _Ctx) -> None:
    need = 1 if c.overlap_p2p else 2
    if c.vpp is not None and c.pp <= need:
        why = "" if c.overlap_p2p else " with p2p overlap disabled"
        c.add("C3", f"train.vpp = {c.vpp} with PP = {c.pp}: validate_args requires PP > {need} for an interleaved "
              f"schedule{why}", "unset train.vpp (the hybrid stack forbids VPP anyway, see D7)")


def _c4(c: _Ctx) -> None:
    if c.ep > 1 and c.experts % c.ep:
        c.add("C4", f"EP = {c.ep} does not divide the {c.experts} experts "
              "('Number of experts should be a multiple of expert model parallel_size')",
              f"use train.ep {_alts(_near(c.legal_ep(), c.ep))}")


def _c5(c: _Ctx) -> None:
    if c.sp_raw is True and c.tp == 1:
        c.add("C5", "train.sequence_parallel = true at TP = 1: Megatron silently turns it off "
              "('Disabling sequence parallelism because tensor model parallelism is disabled')",
              "unset train.sequence_parallel (on iff TP > 1) or set it to false")


def _c8(c: _Ctx) -> None:
    if c.dp is not None and c.gbs % (c.mbs * c.dp):
        step = c.mbs * c.dp
        lo = max(step, c.gbs // step * step)
        c.add("C8", f"global batch {c.gbs} is not divisible by micro batch {c.mbs} × DP {c.dp} = {step} "
              f"('global batch size ({c.gbs}) is not divisible by micro batch size ({c.mbs}) times data parallel "
              f"size ({c.dp})')", f"use batch.global_batch_size {_alts(sorted({lo, lo + step}))}")


def _c10(c: _Ctx) -> None:
    if c.keep_mtp and c.mtp_layers and c.pos_emb not in ("rope", "none"):
        c.add("C10", f"the MTP head is kept ({KEEP_MTP_ENV}) but position embedding is '{c.pos_emb}': MTP "
              "supports only rope or none", f"drop {KEEP_MTP_ENV} from run.extra_env, or use "
              "model.position_embedding_type = \"none\"")


def _c11(c: _Ctx) -> None:
    if c.cdmc is not None and c.cdmc.strip() != "1" and (c.tp > 1 or c.cp > 1):
        c.add("C11", f"run.extra_env sets CUDA_DEVICE_MAX_CONNECTIONS = {c.cdmc!r} with TP = {c.tp}, CP = {c.cp}: "
              "Megatron requires 1 when tensor or context parallelism is on",
              "remove CUDA_DEVICE_MAX_CONNECTIONS from run.extra_env (the job sets it to 1)",
              ("run.extra_env", "train.tp", "train.cp"))


# --------------------------------------------------------------------------- D: hybrid / Mamba

def _d1(c: _Ctx) -> None:
    if c.has_mamba and c.m_heads % c.tp:
        c.add("D1", f"TP = {c.tp} does not divide the {c.m_heads} Mamba heads ('nheads must be evenly divisble "
              "by tp_size')", f"TP must divide Mamba heads={c.m_heads}: use {_alts(_near(c.legal_tp(), c.tp))}")


def _d2(c: _Ctx) -> None:
    if c.has_mamba and c.m_groups % c.tp:
        c.add("D2", f"TP = {c.tp} does not divide the {c.m_groups} Mamba groups ('ngroups must be evenly "
              "divisible by tp_size'); this caps attention/Mamba TP",
              f"TP must divide Mamba n_groups={c.m_groups}: use {_alts(_near(c.legal_tp(), c.tp))}")


def _d3(c: _Ctx) -> None:
    if c.has_mamba and c.m_heads % c.m_groups:
        c.add("D3", f"{c.m_heads} Mamba heads do not split into {c.m_groups} groups ('nheads must be evenly "
              "divisible by ngroups')",
              f"use model.mamba_num_groups {_alts(_near(_divisors(c.m_heads), c.m_groups))}")


def _d5(c: _Ctx) -> None:
    if len(c.pattern) != c.layers:
        c.add("D5", f"model.hybrid_pattern has {len(c.pattern)} layers but model.num_layers = {c.layers} "
              f"('The hybrid override pattern is the wrong length: got {len(c.pattern)}, expected {c.layers}')",
              f"set model.num_layers = {len(c.pattern)} or give a pattern of {c.layers} symbols")


def _d7(c: _Ctx) -> None:
    if c.vpp is not None:
        c.add("D7", f"train.vpp = {c.vpp}: the Mamba hybrid stack does not support virtual/interleaved pipeline "
              "parallelism (neither does Megatron-Bridge's hybrid provider)", "unset train.vpp",
              ("train.vpp",))
    if c.uneven_args and c.pp > 1:
        per = c.layers // c.pp
        fields = ("train.decoder_first_pipeline_num_layers", "train.decoder_last_pipeline_num_layers", "train.pp")
        if c.layers % c.pp:
            c.add("D7", f"{c.layers} layers over PP = {c.pp}: with first/last-stage sizes or train.vpp given, "
                  "validate_args skips its even-split check, and the Mamba stack of miles' Megatron fork gives "
                  f"every stage ⌊{c.layers}/{c.pp}⌋ = {per} layers, dropping the last {c.layers - per * c.pp}",
                  f"use train.pp {_alts(_near(c.legal_pp(), c.pp))} and unset the first/last-stage sizes and "
                  "train.vpp", (*fields, "train.vpp", "model.num_layers"))
        elif c.first is not None or c.last is not None:
            c.add("D7", f"first/last-stage sizes ({c.first}/{c.last}) are ignored by the Mamba stack of miles' "
                  f"Megatron fork: every stage gets {per} layers", "unset "
                  "train.decoder_first_pipeline_num_layers and train.decoder_last_pipeline_num_layers",
                  fields, "warning")


def _d10(c: _Ctx) -> None:
    bad = set(c.mtp_pattern) - MTP_SYMBOLS
    if c.mtp_layers and bad:
        c.add("D10", f"model.mtp_pattern {c.mtp_pattern!r} has unknown layer symbols {''.join(sorted(bad))!r}",
              "use the checkpoint's MTP pattern (\"*E\") built from M, *, E, -")


# --------------------------------------------------------------------------- E, F: MoE runtime, MTP

def _e2(c: _Ctx) -> None:
    if c.has_moe and c.tp > 1 and not c.sp:
        c.add("E2", f"MoE training with TP = {c.tp} and sequence parallelism off: Megatron's MoE layer raises "
              "at the first training forward ('performance may degrade if MoE and tensor parallelism are enabled "
              "without also enabling sequence parallelism')",
              "set train.sequence_parallel = true or unset it (on iff TP > 1), or use train.tp = 1")


def _e4(c: _Ctx) -> None:
    if c.heads % c.tp or (c.groups % c.tp and c.tp % c.groups):
        return  # B1/B2 stop construction before any linear is built
    bad: list[str] = []
    fields: list[str] = []
    qkv = (c.heads + 2 * c.groups) * c.kv
    if c.has_attn and qkv % c.tp:
        bad.append(f"QKV width {qkv} / TP {c.tp}")
        fields += ["train.tp", "model.kv_channels"]
    if c.has_moe and c.shared and c.shared % c.tp:
        bad.append(f"shared expert width {c.shared} / TP {c.tp}")
        fields += ["train.tp", "model.shared_expert_intermediate_size"]
    if c.has_moe and c.moe_ffn % c.etp:
        bad.append(f"expert FFN width {c.moe_ffn} / ETP {c.etp}")
        fields += ["train.etp", "model.moe_ffn_hidden_size"]
    if c.has_mlp and c.ffn % c.tp:
        bad.append(f"MLP width {c.ffn} / TP {c.tp}")
        fields += ["train.tp", "model.ffn_hidden_size"]
    if bad:
        c.add("E4", "tensor-parallel linear layers do not shard evenly: " + "; ".join(bad),
              f"use train.tp {_alts(_near([v for v in c.legal_tp() if (c.shared % v == 0)], c.tp))}"
              f" and train.etp {_alts(_near(_divisors(c.moe_ffn), 1))}", tuple(dict.fromkeys(fields)))


def _f1(c: _Ctx) -> None:
    if c.keep_mtp and c.mtp_layers and c.pp > 1:
        c.add("F1", f"the kept MTP block ({c.mtp_layers} × '{c.mtp_pattern}') sits on the last pipeline stage "
              f"(stage {c.pp - 1}), which therefore holds more parameters than the others", "")


def _f2(c: _Ctx) -> None:
    if c.mtp_layers and not c.mtp_pattern:
        c.add("F2", f"model.mtp_num_layers = {c.mtp_layers} without model.mtp_pattern: Megatron-Bridge raises "
              "'num_nextn_predict_layers > 0 must define mtp_hybrid_override_pattern'",
              "set model.mtp_pattern = \"*E\" (the checkpoint's) or model.mtp_num_layers = 0")


def _f3(c: _Ctx) -> None:
    if c.enable_mtp_flag and not (c.keep_mtp and c.mtp_layers):
        c.add("F3", "run.extra_args has --enable-mtp-training but the MTP head is not built "
              f"({KEEP_MTP_ENV} unset or model.mtp_num_layers = 0): 'mtp_num_layers must be set when "
              "enable_mtp_training is set'", f"set {KEEP_MTP_ENV}=1 in run.extra_env or drop the flag",
              ("run.extra_args", "run.extra_env"), "error")
    elif c.keep_mtp and c.mtp_layers:
        c.add("F3", f"{KEEP_MTP_ENV} is set: the checkpoint's MTP head ({c.mtp_layers} layer) is built; the "
              "recipe does not train it", f"remove {KEEP_MTP_ENV} from run.extra_env to follow the recipe",
              ("run.extra_env",), "info")


# --------------------------------------------------------------------------- G: SGLang engine

def _g1(c: _Ctx) -> None:
    if c.dpa and c.rdp > 1 and c.g % c.rdp:
        c.add("G1", f"rollout dp {c.rdp} does not divide the {c.g} GPUs of an engine (DP-attention needs tp % dp "
              "== 0)", f"use rollout.dp {_alts(_near(c.legal_rollout_dp() or _divisors(c.g), c.rdp))}")


def _g4(c: _Ctx) -> None:
    if c.g % c.nn:
        c.add("G4", f"an engine of {c.g} GPUs spans {c.nn} nodes of {c.gpn}: SGLang needs tp divisible by the "
              "node count ('tp_size must be divisible by number of nodes')",
              f"use rollout.gpus_per_engine {_alts(_near([k * c.gpn for k in range(1, 9)], c.g))}")


def _g6(c: _Ctx) -> None:
    if c.has_moe and c.rep not in (1, c.g):
        c.add("G6", f"rollout ep {c.rep} with {c.g}-GPU engines: NemotronH in BF16 on H100/H200 runs the "
              "flashinfer_cutlass MoE, which needs ep ∈ {1, tp} ('The expert parallel size must be 1 or the same "
              "as the tensor parallel size')", f"use rollout.ep {c.g} (or 1)")


def _g7(c: _Ctx) -> None:
    if c.r_backend == "triton":
        c.add("G7", "rollout.sglang_attention_backend = 'triton': NemotronHForCausalLM does not support the "
              "triton attention backend", "unset rollout.sglang_attention_backend (SGLang picks) or use fa3")


def _attn_fix(c: _Ctx) -> str:
    """Nearest rollout.dp giving a legal attn_tp; else engine sizes that do at the current dp."""
    dps = c.legal_rollout_dp()
    if dps:
        return f"use rollout.dp {_alts(_near(dps, c.rdp))} (attn_tp = gpus_per_engine/dp)"
    scale = c.rdp if c.dpa and c.rdp > 1 else 1
    sizes = [a * scale for a in range(1, max(c.heads, c.m_heads) + 1) if c.attn_tp_ok(a)]
    return f"use rollout.gpus_per_engine {_alts(_near(sizes, c.g))} (attn_tp = gpus_per_engine/dp)"


def _g9(c: _Ctx) -> None:
    a = c.attn_tp
    if a is None or not c.has_mamba:
        return
    if c.m_heads % a or (c.m_groups % a and c.m_groups != 1):
        c.add("G9", f"attention TP = {c.g}/{c.rdp} = {a} in the rollout engine does not divide the Mamba heads "
              f"({c.m_heads}) and n_groups ({c.m_groups}); SGLang fails at model load",
              f"attn_tp must divide Mamba n_groups={c.m_groups}: {_attn_fix(c)}")


def _g10(c: _Ctx) -> None:
    a = c.attn_tp
    if a is None or not c.has_attn:
        return
    kv_bad = c.groups % a if c.groups >= a else a % c.groups
    if c.heads % a or kv_bad:
        c.add("G10", f"attention TP = {a} in the rollout engine does not fit {c.heads} heads / {c.groups} KV heads "
              "(SGLang's NemotronH attention asserts at model load)",
              _attn_fix(c))


def _g11(c: _Ctx) -> None:
    if not c.has_moe:
        return
    if c.g % c.rep:
        c.add("G11", f"rollout ep {c.rep} does not divide the {c.g}-GPU engine (moe_tp = tp/ep must be whole)",
              f"use rollout.ep {c.g} (or 1)")
    elif c.experts % c.rep or c.moe_ffn % (c.g // c.rep):
        moe_tp = c.g // c.rep
        c.add("G11", f"fused MoE cannot shard: {c.experts} experts over ep {c.rep} and expert width {c.moe_ffn} over "
              f"moe_tp {moe_tp} must both divide", f"use rollout.ep {c.g} (or 1) with gpus_per_engine "
              f"{_alts(_near([d for d in _divisors(c.experts) if d % c.gpn == 0 or d <= c.gpn], c.g))}")


def _g12(c: _Ctx) -> None:
    if c.g > c.gpn and c.g % c.gpn:
        c.add("G12", f"an engine of {c.g} GPUs does not fill whole {c.gpn}-GPU nodes: miles starts "
              f"{c.nn} node(s), so SGLang's world ({c.nn} × {c.g // c.nn}) cannot equal tp = {c.g} on "
              f"{c.gpn}-GPU nodes", f"use rollout.gpus_per_engine {_alts(_near([k * c.gpn for k in range(1, 9)], c.g))}")
    elif c.g < c.gpn and c.gpn % c.g:
        c.add("G12", f"engines of {c.g} GPUs do not tile a {c.gpn}-GPU node: some engines would straddle two nodes",
              f"use rollout.gpus_per_engine {_alts(_near(_divisors(c.gpn), c.g))}", severity="warning")


# --------------------------------------------------------------------------- H: miles

def _h2(c: _Ctx) -> None:
    if c.rdp > 1 and not c.dpa:
        c.add("H2", f"rollout dp {c.rdp} without DP-attention: miles asserts sglang_enable_dp_attention when "
              "sglang_dp_size > 1", "set rollout.enable_dp_attention = true (or rollout.dp = 1)")


def _h3(c: _Ctx) -> None:
    if c.colocate and c.num_gpus is not None and c.num_gpus != c.W:
        c.add("H3", f"rollout.num_gpus = {c.num_gpus} but colocated rollout always uses all {c.W} training GPUs: "
              f"miles overrides it to {c.W}", f"unset rollout.num_gpus (or set it to {c.W})",
              ("rollout.num_gpus", "rollout.colocate"), "warning")
    elif not c.colocate and c.num_gpus is None:
        c.add("H3", f"non-colocated rollout without rollout.num_gpus: miles places the {c.W} training GPUs but "
              "has no GPU count for the engines (its placement arithmetic fails)", f"set rollout.num_gpus (e.g. {c.W}) or rollout.colocate = true",
              ("rollout.num_gpus", "rollout.colocate"), "error")


def _h4(c: _Ctx) -> None:
    R = c.R
    if R is None:
        return
    if R < c.g:
        c.add("H4", f"the rollout pool has {R} GPUs, fewer than one {c.g}-GPU engine: no engine can start",
              f"use rollout.gpus_per_engine {_alts(_near(c.engine_sizes(R), c.g))}", severity="error")
    elif R % c.g:
        c.add("H4", f"{R} rollout GPUs do not divide into {c.g}-GPU engines: {R // c.g} engines, {R % c.g} GPUs "
              "left without a complete engine (miles floors; the launcher would assert)",
              f"use rollout.gpus_per_engine {_alts(_near(c.engine_sizes(R), c.g))}",
              severity="warning")


def _h6(c: _Ctx) -> None:
    samples = c.rbs * c.n
    if c.steps is not None:
        want = samples // c.steps
        if c.gbs != want:
            c.add("H6", f"global batch {c.gbs} ≠ rollout batch {c.rbs} × {c.n} samples // {c.steps} steps = {want} "
                  "(miles asserts this when num_steps_per_rollout is set)",
                  f"set batch.global_batch_size = {want} or unset batch.num_steps_per_rollout",
                  severity="error")
    elif samples < c.gbs:
        c.add("H6", f"a rollout yields {c.rbs} × {c.n} = {samples} samples, fewer than the global batch {c.gbs}: "
              f"training raises 'Not enough samples {samples} for global_batch_size {c.gbs}'",
              f"use batch.global_batch_size {_alts(_near(_divisors(samples), c.gbs, 3))} (at most {samples})",
              ("batch.global_batch_size", "batch.rollout_batch_size", "batch.n_samples_per_prompt"), "error")
    elif samples % c.gbs:
        c.add("H6", f"{samples} samples per rollout are not a multiple of the global batch {c.gbs}: "
              f"{samples % c.gbs} samples are trimmed every rollout",
              f"use batch.global_batch_size {_alts(_near(_divisors(samples), c.gbs, 3))}",
              ("batch.global_batch_size", "batch.rollout_batch_size", "batch.n_samples_per_prompt"), "warning")


def _h7(c: _Ctx) -> None:
    if c.osb is not None and c.osb < c.rbs:
        c.add("H7", f"over_sampling_batch_size {c.osb} is below rollout_batch_size {c.rbs}",
              f"set batch.over_sampling_batch_size ≥ {c.rbs} or unset it")


def _h8(c: _Ctx) -> None:
    if c.dyn and c.max_tokens is None:
        c.add("H8", "dynamic batch size is on but batch.max_tokens_per_gpu is unset "
              "('max_tokens_per_gpu must be set when use_dynamic_batch_size is set')",
              "set batch.max_tokens_per_gpu = 1024 (the recipe's)")


def _h10(c: _Ctx) -> None:
    if c.pp == 1 and (c.first is not None or c.last is not None):
        c.add("H10", "first/last pipeline-stage sizes are set with PP = 1 (miles: 'should be None when "
              "pipeline_model_parallel_size is 1')",
              "unset train.decoder_first_pipeline_num_layers and train.decoder_last_pipeline_num_layers")


_LAUNCHER_FIELDS = {
    "GPUs": ("cluster.nodes", "cluster.gpus_per_node"), "tp": ("train.tp",), "pp": ("train.pp",),
    "ep": ("train.ep",), "etp": ("train.etp",), "gpus_per_engine": ("rollout.gpus_per_engine",),
    "rollout dp": ("rollout.dp",), "rollout ep": ("rollout.ep",), "mem_fraction": ("rollout.mem_fraction",),
}


def _launcher_table(c: _Ctx) -> dict[str, tuple[Any, Any]]:
    """spec value vs. what run_nemotron_3_ultra_550b_a55b.py would use, for the values that differ."""
    if c.m.is_slice:
        want = {"tp": 1, "pp": 1, "ep": c.W, "etp": 1, "gpus_per_engine": c.gpn, "rollout dp": 2,
                "rollout ep": c.gpn, "mem_fraction": 0.6}
    else:
        want = {"GPUs": 128, "tp": 8, "pp": 4, "ep": 32, "etp": 1, "gpus_per_engine": 32, "rollout dp": 4,
                "rollout ep": 32, "mem_fraction": 0.7}
    have = {"GPUs": c.W, "tp": c.tp, "pp": c.pp, "ep": c.ep, "etp": c.etp_raw, "gpus_per_engine": c.g,
            "rollout dp": c.rdp, "rollout ep": c.rep, "mem_fraction": c.mem_fraction}
    return {k: (have[k], v) for k, v in want.items() if have[k] != v}


def _h12(c: _Ctx) -> None:
    diff = _launcher_table(c)
    if diff:
        shown = ", ".join(f"{k} {'unset' if h is None else h} (launcher: {w})" for k, (h, w) in diff.items())
        fields = tuple(f for k in diff for f in _LAUNCHER_FIELDS[k])
        c.add("H12", f"miles' launcher script would refuse or not offer this layout ({shown}); "
              "ultra-console submits train.py directly, so only the rules of the real stack apply", "", fields)


# --------------------------------------------------------------------------- M: memory (ours, §5)

@dataclass(frozen=True, slots=True)
class _Memory:
    stages: tuple[sizing.StageParams, ...]
    dp: float
    edp: float

    @property
    def worst(self) -> sizing.StageParams:
        return max(self.stages, key=lambda s: s.total)

    def sharded(self, s: sizing.StageParams, cp: int) -> float:
        """Parameters whose optimizer state one GPU owns (distributed optimizer)."""
        return s.expert / self.edp + s.dense / (self.dp * cp)

    def max_sharded(self, cp: int) -> float:
        return max(self.sharded(s, cp) for s in self.stages)


def _memory(c: _Ctx) -> _Memory:
    stages = sizing.train_stage_params(c.m, c.tp, c.pp, c.ep, c.etp, c.keep_mtp and c.mtp_layers > 0)
    return _Memory(stages, max(1.0, c.W / c.dense_grid), max(1.0, c.W / c.expert_grid))


def _hbm_need(c: _Ctx, mem: _Memory) -> tuple[float, float, float, float]:
    p = mem.worst.total
    weights, grads = p * sizing.BF16 / sizing.GB, p * sizing.FP32 / sizing.GB
    optim = 0.0 if c.offload else mem.max_sharded(c.cp) * sizing.ADAM_BYTES / sizing.GB
    return weights, grads, optim, weights + grads + optim


def _m1(c: _Ctx, mem: _Memory) -> None:
    weights, grads, optim, need = _hbm_need(c, mem)
    if need <= WARN_FRACTION * c.hbm:
        return
    opt = f" + {_gb(optim)} Adam state (optimizer.cpu_offload off)" if optim else ""
    what = (f"training needs {_gb(need)} per GPU ({_gb(weights)} bf16 weights + {_gb(grads)} fp32 grads{opt}, "
            f"{mem.worst.total / 1e9:.3f} B params on the fullest stage)")
    fix = ("raise train.ep or train.pp to put fewer parameters on each GPU"
           + ("" if c.offload else ", or set optimizer.cpu_offload = true"))
    if need > c.hbm:
        c.add("M1", f"{what} but a GPU has {c.hbm:g} GB", fix)
    else:
        c.add("M1", f"{what}: over {WARN_FRACTION:.0%} of {c.hbm:g} GB HBM, little left for activations and "
              "NCCL buffers", fix, severity="warning")


def _m2(c: _Ctx, mem: _Memory) -> None:
    if not c.offload:
        return
    per_gpu = mem.max_sharded(c.cp) * (sizing.ADAM_BYTES + sizing.FP32) / sizing.GB
    per_node = per_gpu * c.gpn
    if per_node <= WARN_FRACTION * c.host_mem:
        return
    what = (f"offloaded Adam state + host grad copies need {_gb(per_gpu)} per GPU = {_gb(per_node)} per "
            f"{c.gpn}-GPU node (expert state sharded over EDP {mem.edp:g}, dense over DP {mem.dp:g})")
    fix = "raise EDP (lower train.ep·train.etp·train.pp for the same GPUs) or DP, or use nodes with more host RAM"
    if per_node > c.host_mem:
        c.add("M2", f"{what} but a node has {c.host_mem:g} GB host RAM", fix)
    else:
        c.add("M2", f"{what}: over {WARN_FRACTION:.0%} of {c.host_mem:g} GB host RAM", fix, severity="warning")


def _rollout_gb(c: _Ctx) -> float | None:
    if c.attn_tp is None:
        return None
    return sizing.rollout_params_per_gpu(c.m, c.g, c.attn_tp) * sizing.BF16 / sizing.GB


def _m3(c: _Ctx) -> None:
    need = _rollout_gb(c)
    if need is None:
        return
    budget = c.mem_fraction * c.hbm
    if need <= WARN_FRACTION * budget:
        return
    bigger = [k * c.gpn for k in (1, 2, 4, 8, 16) if k * c.gpn > c.g and (c.R is None or c.R % (k * c.gpn) == 0)]
    fix = (f"use larger engines (rollout.gpus_per_engine {_alts(bigger[:3])} with rollout.ep equal to it)"
           if bigger else "use larger engines") + " or raise rollout.mem_fraction"
    what = (f"rollout weights need about {_gb(need)} per GPU in {c.g}-GPU engines (attn_tp {c.attn_tp}, "
            f"ep {c.rep})")
    if need > budget:
        c.add("M3", f"{what}, more than mem_fraction {c.mem_fraction:g} × {c.hbm:g} GB = {_gb(budget)}", fix)
    else:
        c.add("M3", f"{what}: over {WARN_FRACTION:.0%} of the {_gb(budget)} static budget, little room for KV "
              "cache and Mamba state", fix, severity="warning")


# --------------------------------------------------------------------------- engine

_CHECKS: dict[str, Callable[[_Ctx], None]] = {
    "A1": _a1, "A2": _a2, "A3": _a3, "A8": _a8,
    "B1": _b1, "B2": _b2, "B4": _b4, "B7": _b7, "B10": _b10, "B11": _b11, "B12": _b12, "B13": _b13, "B14": _b14,
    "C2": _c2, "C3": _c3, "C4": _c4, "C5": _c5, "C8": _c8, "C10": _c10, "C11": _c11,
    "D1": _d1, "D2": _d2, "D3": _d3, "D5": _d5, "D7": _d7, "D10": _d10,
    "E2": _e2, "E4": _e4, "F1": _f1, "F2": _f2, "F3": _f3,
    "G1": _g1, "G4": _g4, "G6": _g6, "G7": _g7, "G9": _g9, "G10": _g10, "G11": _g11, "G12": _g12,
    "H2": _h2, "H3": _h3, "H4": _h4, "H6": _h6, "H7": _h7, "H8": _h8, "H10": _h10, "H12": _h12,
    "M3": _m3,
}
_MEMORY_CHECKS: dict[str, Callable[[_Ctx, _Memory], None]] = {"M1": _m1, "M2": _m2}

if set(_CHECKS) | set(_MEMORY_CHECKS) != set(CHECKED):  # pragma: no cover - catalog and engine must agree
    raise RuntimeError(f"rule engine and catalog disagree: {sorted(set(CHECKED) ^ (set(_CHECKS) | set(_MEMORY_CHECKS)))}")

_PIPELINE: tuple[Callable[[_Ctx], None], ...] = tuple(_CHECKS.values())


def _sort_key(f: Finding) -> tuple[int, int]:
    return SEVERITY_RANK[f.severity], ORDER[f.rule]


def check(spec: RunSpec) -> list[Finding]:
    """Every finding for a spec: errors first, then warnings, then info; catalog order within each."""
    c = _Ctx(spec)
    for rule in _PIPELINE:
        rule(c)
    mem = _memory(c)
    _m1(c, mem)
    _m2(c, mem)
    c.out.sort(key=_sort_key)
    return c.out


# --------------------------------------------------------------------------- derived numbers

def _r3(x: float) -> float:
    return round(x, 3)


def derive(spec: RunSpec) -> dict[str, Any]:
    """The numbers a layout implies (JSON-able), per constraints.md §3 and §5."""
    c = _Ctx(spec)
    mem = _memory(c)
    slices = sizing.stage_slices(c.pattern, c.layers, c.pp)
    stages = []
    for sl, sp in zip(slices, mem.stages, strict=True):
        row = sl.to_json()
        row["params_per_gpu_b"] = _r3(sp.total / 1e9)
        stages.append(row)
    weights, grads, _optim, need = _hbm_need(c, mem)
    adam = mem.max_sharded(c.cp) * sizing.ADAM_BYTES / sizing.GB
    copies = mem.max_sharded(c.cp) * sizing.FP32 / sizing.GB
    samples = c.rbs * c.n
    rollout_gb = _rollout_gb(c)
    return {
        "world_size": c.W,
        "dp": c.dp,
        "edp": c.edp,
        "etp": c.etp,
        "sequence_parallel": c.sp,
        "experts_per_rank": c.experts // c.ep if c.experts % c.ep == 0 else None,
        "layers_per_stage": c.layers // c.pp,
        "stages": stages,
        "ep_group_nodes": max(1, c.etp * c.ep // c.gpn),
        "rollout_gpus": c.R,
        "rollout_engines": c.R // c.g if c.R is not None else None,
        "rollout_nodes_per_engine": c.nn,
        "rollout_engine_processes": c.R // min(c.g, c.gpn) if c.R is not None else None,
        "attn_tp": c.attn_tp,
        "rollout_moe_tp": c.g // c.rep if c.g % c.rep == 0 else None,
        "rollout_experts_per_rank": c.experts // c.rep if c.experts % c.rep == 0 else None,
        "samples_per_rollout": samples,
        "optimizer_steps_per_rollout": c.steps if c.steps is not None else samples // c.gbs,
        "params_per_gpu": [round(s.total) for s in mem.stages],
        "params_per_gpu_max_b": _r3(mem.worst.total / 1e9),
        "weights_gb_per_gpu": _r3(weights),
        "grads_gb_per_gpu": _r3(grads),
        "weights_grads_gb_per_gpu": _r3(weights + grads),
        "optimizer_gb_per_gpu": _r3(adam),
        "optimizer_location": "host" if c.offload else "gpu",
        "train_hbm_gb_per_gpu": _r3(need),
        "host_adam_gb_per_gpu": _r3(adam) if c.offload else 0.0,
        "host_adam_gb_per_node": _r3(adam * c.gpn) if c.offload else 0.0,
        "host_grad_copies_gb_per_gpu": _r3(copies) if c.offload else 0.0,
        "host_gb_per_node": _r3((adam + copies) * c.gpn) if c.offload else 0.0,
        "rollout_weights_gb_per_gpu": _r3(rollout_gb) if rollout_gb is not None else None,
        "rollout_static_gb_per_gpu": _r3(c.mem_fraction * c.hbm),
        "model_params_b": _r3(sizing.total_params(c.m) / 1e9),
    }


# --------------------------------------------------------------------------- legal values

def _with(spec: RunSpec, field: str, value: Any) -> RunSpec:
    section, _, name = field.partition(".")
    part = getattr(spec, section)
    if not name or name not in type(part).model_fields:
        raise KeyError(field)
    return spec.model_copy(update={section: part.model_copy(update={name: value})})


def legal_values(spec: RunSpec, field: str, candidates: Iterable[Any] | None = None) -> list[Any]:
    """Values of one dotted field (others unchanged) that leave no error finding naming that field.

    Default candidates are 1..128 (integer layout fields). Each candidate is a full `check`, so this is for
    the UI's value pickers, not the hot path.
    """
    values = list(range(1, 129)) if candidates is None else list(candidates)
    out = []
    for v in values:
        found = check(_with(spec, field, v))
        if not any(f.severity == "error" and field in f.fields for f in found):
            out.append(v)
    return out
