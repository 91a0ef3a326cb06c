"""Catalog section M: memory (ultra-console's own estimates).

Training HBM (bf16 weights + fp32 grads + Adam state unless offloaded), offloaded Adam state and
host grad copies per node, and rollout weights within mem_fraction × HBM. Above WARN_FRACTION of a
budget is a warning: too little headroom for activations, NCCL buffers, KV cache.
"""

from __future__ import annotations

from backend.plan import sizing
from backend.plan.checks.context import Check, LayoutContext
from backend.plan.checks.values import alts, gb
from backend.severity import Severity

WARN_FRACTION = 0.8  # memory use above this share of a budget is a warning (too little headroom)


def _m1(c: LayoutContext) -> None:
    mem = c.memory()
    hbm = c.hbm_need()
    weights, grads, optim, need = hbm.weights, hbm.grads, hbm.optimizer, hbm.total
    if need <= WARN_FRACTION * c.hbm:
        return
    opt = f" + {gb(optim)} Adam state (optimizer.cpu_offload off)" if optim else ""
    what = (
        f"training needs {gb(need)} per GPU ({gb(weights)} bf16 weights + {gb(grads)} fp32 grads{opt}, "
        f"{mem.worst.total / 1e9:.3f} B params on the fullest stage)"
    )
    fix = "raise train.ep or train.pp to put fewer parameters on each GPU" + (
        "" if c.offload else ", or set optimizer.cpu_offload = true"
    )
    if need > c.hbm:
        c.add("M1", f"{what} but a GPU has {c.hbm:g} GB", fix)
    else:
        c.add(
            "M1",
            f"{what}: over {WARN_FRACTION:.0%} of {c.hbm:g} GB HBM, little left for activations and "
            "NCCL buffers",
            fix,
            severity=Severity.WARNING,
        )


def _m2(c: LayoutContext) -> None:
    if not c.offload:
        return
    mem = c.memory()
    per_gpu = c.optimizer_gb() + c.optimizer_params() * sizing.FP32 / sizing.GB
    per_node = per_gpu * c.gpn
    if per_node <= WARN_FRACTION * c.host_mem:
        return
    shard = (
        f"expert state sharded over EDP {mem.edp:g}, dense over DP {mem.dp:g}"
        if c.distributed_optimizer
        else f"not sharded: miles turns the distributed optimizer off for {c.spec.optimizer.name}"
    )
    what = (
        f"offloaded optimizer state + host grad copies need {gb(per_gpu)} per GPU = {gb(per_node)} per "
        f"{c.gpn}-GPU node ({shard})"
    )
    fix = (
        "raise EDP (lower train.ep·train.etp·train.pp for "
        "the same GPUs) or DP, or use nodes with more host RAM"
    )
    if per_node > c.host_mem:
        c.add("M2", f"{what} but a node has {c.host_mem:g} GB host RAM", fix)
    else:
        c.add(
            "M2",
            f"{what}: over {WARN_FRACTION:.0%} of {c.host_mem:g} GB host RAM",
            fix,
            severity=Severity.WARNING,
        )


def _m3(c: LayoutContext) -> None:
    need = c.rollout_weights_gb()
    if need is None:
        return
    budget = c.mem_fraction * c.hbm
    if need <= WARN_FRACTION * budget:
        return
    bigger = [
        k * c.gpn for k in (1, 2, 4, 8, 16) if k * c.gpn > c.g and (c.R is None or c.R % (k * c.gpn) == 0)
    ]
    fix = (
        f"use larger engines (rollout.gpus_per_engine {alts(bigger[:3])} with rollout.ep equal to it)"
        if bigger
        else "use larger engines"
    ) + " or raise rollout.mem_fraction"
    what = (
        f"rollout weights need about {gb(need)} per GPU in {c.g}-GPU engines (attn_tp {c.attn_tp}, "
        f"ep {c.rep})"
    )
    if need > budget:
        c.add("M3", f"{what}, more than mem_fraction {c.mem_fraction:g} × {c.hbm:g} GB = {gb(budget)}", fix)
    else:
        c.add(
            "M3",
            f"{what}: over {WARN_FRACTION:.0%} of the {gb(budget)} static budget, little room for KV "
            "cache and Mamba state",
            fix,
            severity=Severity.WARNING,
        )


CHECKS: dict[str, Check] = {"M1": _m1, "M2": _m2, "M3": _m3}
