"""Catalog section E: MoE at run time.

Failures that only show at the first training step or when the linear layers are built, re-derived
arithmetically (there is no CPU entry point for them).
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class _Shard:
    """One tensor-parallel linear layer's width and the degree that splits it."""

    present: bool  # the pattern has the layer kind (and, for the shared expert, a width)
    label: str
    width: int
    degree_name: str
    degree: int
    fields: tuple[str, str]


def _tp_shards(c: LayoutContext) -> tuple[_Shard, ...]:
    """The linear layers TP and ETP shard, in the order E4 names them."""
    qkv = (c.heads + 2 * c.groups) * c.kv
    return (
        _Shard(c.has_attn, "QKV width", qkv, "TP", c.tp, ("train.tp", "model.kv_channels")),
        _Shard(
            c.has_moe and bool(c.shared),
            "shared expert width",
            c.shared,
            "TP",
            c.tp,
            ("train.tp", "model.shared_expert_intermediate_size"),
        ),
        _Shard(
            c.has_moe, "expert FFN width", c.moe_ffn, "ETP", c.etp, ("train.etp", "model.moe_ffn_hidden_size")
        ),
        _Shard(c.has_mlp, "MLP width", c.ffn, "TP", c.tp, ("train.tp", "model.ffn_hidden_size")),
    )


def _uneven(c: LayoutContext) -> list[_Shard]:
    """The linear layers whose width the degree does not divide."""
    return [s for s in _tp_shards(c) if s.present and s.width % s.degree]


def _e4(c: LayoutContext) -> None:
    if c.heads % c.tp or (c.groups % c.tp and c.tp % c.groups):
        return  # B1/B2 stop construction before any linear is built
    uneven = _uneven(c)
    if uneven:
        c.add(
            "E4",
            "tensor-parallel linear layers do not shard evenly: "
            + "; ".join(f"{s.label} {s.width} / {s.degree_name} {s.degree}" for s in uneven),
            _e4_fix(c),
            tuple(dict.fromkeys(f for s in uneven for f in s.fields)),
        )


def _e4_fix(c: LayoutContext) -> str:
    """The nearest TP that shards the shared expert and the nearest ETP that shards the expert FFN."""
    tp = near([v for v in c.legal_tp() if c.shared % v == 0], c.tp)
    return f"use train.tp {alts(tp)} and train.etp {alts(near(divisors(c.moe_ffn), 1))}"


CHECKS: dict[str, Check] = {"E2": _e2, "E4": _e4}
