"""Catalog section G: the SGLang rollout engine.

One engine's tp/dp/ep against the model: DP-attention, engines spanning nodes, the MoE runner's ep,
the attention backend, and the attention TP that must divide Mamba and attention heads at model load.
"""

from __future__ import annotations

from backend.plan.checks.context import Check, LayoutContext
from backend.plan.checks.values import alts, divisors, near
from backend.severity import Severity


def _g1(c: LayoutContext) -> None:
    if c.dpa and c.rdp > 1 and c.g % c.rdp:
        c.add(
            "G1",
            f"rollout dp {c.rdp} does not divide the {c.g} GPUs of an engine (DP-attention needs tp % dp "
            "== 0)",
            f"use rollout.dp {alts(near(c.legal_rollout_dp() or divisors(c.g), c.rdp))}",
        )


def _g4(c: LayoutContext) -> None:
    if c.g % c.nn:
        c.add(
            "G4",
            f"an engine of {c.g} GPUs spans {c.nn} nodes of {c.gpn}: SGLang needs tp divisible by the "
            "node count ('tp_size must be divisible by number of nodes')",
            f"use rollout.gpus_per_engine {alts(near([k * c.gpn for k in range(1, 9)], c.g))}",
        )


def _g6(c: LayoutContext) -> None:
    if c.has_moe and c.rep not in (1, c.g):
        c.add(
            "G6",
            f"rollout ep {c.rep} with {c.g}-GPU engines: NemotronH in BF16 on H100/H200 runs the "
            "flashinfer_cutlass MoE, which needs ep ∈ {1, tp} ('The expert parallel size must be 1 or the "
            "same as the tensor parallel size')",
            f"use rollout.ep {c.g} (or 1)",
        )


def _g7(c: LayoutContext) -> None:
    if c.r_backend == "triton":
        c.add(
            "G7",
            "rollout.sglang_attention_backend = 'triton': NemotronHForCausalLM does not support the "
            "triton attention backend",
            "unset rollout.sglang_attention_backend (SGLang picks) or use fa3",
        )


def _attn_fix(c: LayoutContext) -> str:
    """Nearest rollout.dp giving a legal attn_tp; else engine sizes that do at the current dp."""
    dps = c.legal_rollout_dp()
    if dps:
        return f"use rollout.dp {alts(near(dps, c.rdp))} (attn_tp = gpus_per_engine/dp)"
    scale = c.rdp if c.dpa and c.rdp > 1 else 1
    # attn_tp must divide the attention heads (or the Mamba
    # heads): their divisors, not a loop to the head count
    candidates = sorted(set(divisors(c.heads)) | set(divisors(c.m_heads)))
    sizes = [a * scale for a in candidates if c.attn_tp_ok(a)]
    return f"use rollout.gpus_per_engine {alts(near(sizes, c.g))} (attn_tp = gpus_per_engine/dp)"


def _g9(c: LayoutContext) -> None:
    a = c.attn_tp
    if a is None or not c.has_mamba:
        return
    if c.m_heads % a or (c.m_groups % a and c.m_groups != 1):
        c.add(
            "G9",
            f"attention TP = {c.g}/{c.rdp} = {a} in the rollout engine does not divide the Mamba heads "
            f"({c.m_heads}) and n_groups ({c.m_groups}); SGLang fails at model load",
            f"attn_tp must divide Mamba n_groups={c.m_groups}: {_attn_fix(c)}",
        )


def _g10(c: LayoutContext) -> None:
    a = c.attn_tp
    if a is None or not c.has_attn:
        return
    kv_bad = c.groups % a if c.groups >= a else a % c.groups
    if c.heads % a or kv_bad:
        c.add(
            "G10",
            f"attention TP = {a} in the rollout engine does not fit {c.heads} heads / {c.groups} KV heads "
            "(SGLang's NemotronH attention asserts at model load)",
            _attn_fix(c),
        )


def _g11(c: LayoutContext) -> None:
    if not c.has_moe:
        return
    if c.g % c.rep:
        c.add(
            "G11",
            f"rollout ep {c.rep} does not divide the {c.g}-GPU engine (moe_tp = tp/ep must be whole)",
            f"use rollout.ep {c.g} (or 1)",
        )
    elif c.experts % c.rep or c.moe_ffn % (c.g // c.rep):
        moe_tp = c.g // c.rep
        c.add(
            "G11",
            f"fused MoE cannot shard: {c.experts} experts over ep {c.rep} and expert width {c.moe_ffn} over "
            f"moe_tp {moe_tp} must both divide",
            f"use rollout.ep {c.g} (or 1) with gpus_per_engine "
            f"{alts(near([d for d in divisors(c.experts) if d % c.gpn == 0 or d <= c.gpn], c.g))}",
        )


def _g12(c: LayoutContext) -> None:
    if c.g > c.gpn and c.g % c.gpn:
        c.add(
            "G12",
            f"an engine of {c.g} GPUs does not fill whole {c.gpn}-GPU nodes: miles starts "
            f"{c.nn} node(s), so SGLang's world ({c.nn} × {c.g // c.nn}) cannot equal tp = {c.g} on "
            f"{c.gpn}-GPU nodes",
            f"use rollout.gpus_per_engine {alts(near([k * c.gpn for k in range(1, 9)], c.g))}",
        )
    elif c.g < c.gpn and c.gpn % c.g:
        c.add(
            "G12",
            f"engines of {c.g} GPUs do not tile a {c.gpn}-GPU node: some engines would straddle two nodes",
            f"use rollout.gpus_per_engine {alts(near(divisors(c.gpn), c.g))}",
            severity=Severity.WARNING,
        )


CHECKS: dict[str, Check] = {
    "G1": _g1,
    "G4": _g4,
    "G6": _g6,
    "G7": _g7,
    "G9": _g9,
    "G10": _g10,
    "G11": _g11,
    "G12": _g12,
}
