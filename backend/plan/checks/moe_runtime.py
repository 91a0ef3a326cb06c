"""Catalog section E: MoE at run time.

Failures that only show at the first training step or when the linear layers are built, re-derived
arithmetically (there is no CPU entry point for them).
"""

from __future__ import annotations

from backend.plan.checks.context import Check, LayoutContext
from backend.plan.checks.values import alts, divisors, near


def _e2(c: LayoutContext) -> None:
    if c.has_moe and c.tp > 1 and not c.sp:
        c.add(
            "E2",
            f"MoE training with TP = {c.tp} and sequence parallelism off: Megatron's MoE layer raises "
            "at the first training forward ('performance may degrade if MoE and tensor parallelism are "
            "enabled without also enabling sequence parallelism')",
            "set train.sequence_parallel = true or unset it (on iff TP > 1), or use train.tp = 1",
        )


def _e4(c: LayoutContext) -> None:
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
        c.add(
            "E4",
            "tensor-parallel linear layers do not shard evenly: " + "; ".join(bad),
            f"use train.tp {alts(near([v for v in c.legal_tp() if (c.shared % v == 0)], c.tp))}"
            f" and train.etp {alts(near(divisors(c.moe_ffn), 1))}",
            tuple(dict.fromkeys(fields)),
        )


CHECKS: dict[str, Check] = {"E2": _e2, "E4": _e4}
