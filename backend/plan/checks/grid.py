"""Catalog section A: the process-group grid.

Megatron's initialize_model_parallel and validate_args: the training grids TP·PP·CP and
ETP·EP·PP must tile the world, an unset ETP defaults to TP, and an interleaved schedule needs PP > 1.
"""

from __future__ import annotations

from backend.plan.checks.context import Check, LayoutContext
from backend.plan.checks.values import alts, divisors, near


def _a1_fix(c: LayoutContext) -> str:
    """A TP the model allows comes first when the model forbids this one (B1/B2/D1/D2 fire too): that one
    edit clears them all, and no other PP or cluster size helps a TP the model refuses."""
    tps = c.grid_tps()
    if tps and not c.tp_ok_model(c.tp):
        return f"use train.tp {alts(near(tps, c.tp))} (the TP values the model allows that fit the grid)"
    pps = [p for p in divisors(c.W // (c.tp * c.cp))] if c.W % (c.tp * c.cp) == 0 else []
    alt = f"use train.pp {alts(near(pps, c.pp))} at TP={c.tp}, CP={c.cp}, or " if pps else ""
    return f"{alt}use a cluster of {alts(c.nodes_fitting(c.dense_grid))} nodes"


def _a1(c: LayoutContext) -> None:
    if c.W % c.dense_grid:
        c.add(
            "A1",
            f"training grid TP·PP·CP = {c.tp}·{c.pp}·{c.cp} = {c.dense_grid} does not divide the "
            f"{c.world()}: Megatron raises 'world_size ({c.W}) is not divisible by {c.dense_grid}'",
            _a1_fix(c),
        )


def _a2(c: LayoutContext) -> None:
    if c.W % c.expert_grid:
        unset = f" (train.etp unset, so Megatron uses ETP = TP = {c.tp})" if c.etp_raw is None else ""
        eps = [e for e in divisors(c.experts) if c.W % (c.etp * e * c.pp) == 0]
        parts = [f"use train.ep {alts(near(eps, c.ep))}"] if eps else []
        if c.etp != 1 and c.W % (c.ep * c.pp) == 0:
            parts.append("set train.etp = 1")
        parts.append(f"use a cluster of {alts(c.nodes_fitting(c.expert_grid))} nodes")
        c.add(
            "A2",
            f"expert grid ETP·EP·PP = {c.etp}·{c.ep}·{c.pp} = {c.expert_grid} does not divide the "
            f"{c.world()}{unset}: initialize_model_parallel raises 'world_size ({c.W}) is not divisible by "
            f"expert_tensor_model_pipeline_parallel size ({c.expert_grid})'",
            "; or ".join(parts),
        )


def _a3(c: LayoutContext) -> None:
    if c.etp_raw is None and c.tp > 1 and c.ep > 1:
        c.add(
            "A3",
            f"train.etp is unset: Megatron's validate_args makes ETP = TP = {c.tp} (Megatron-Bridge would "
            f"use 1), so the expert grid is {c.tp}·{c.ep}·{c.pp} = {c.tp * c.ep * c.pp} GPUs wide and each "
            f"expert's {c.moe_ffn}-wide FFN is split {c.tp} ways",
            "set train.etp = 1 explicitly (the recipe's value)",
        )


def _a8(c: LayoutContext) -> None:
    if c.vpp is not None and c.pp <= 1:
        c.add(
            "A8",
            f"train.vpp = {c.vpp} with PP = {c.pp}: an interleaved schedule needs PP > 1 "
            "('pipeline-model-parallel size should be greater than 1 with interleaved schedule')",
            "unset train.vpp (this hybrid model cannot use VPP at all, see D7)",
        )


CHECKS: dict[str, Check] = {"A1": _a1, "A2": _a2, "A3": _a3, "A8": _a8}
