"""Catalog section C: Megatron's argument validation.

What validate_args refuses or silently corrects: layers over PP, the interleaved schedule,
experts over EP, SP at TP = 1, the batch over micro batch × DP, MTP position embeddings and
CUDA_DEVICE_MAX_CONNECTIONS.
"""

from __future__ import annotations

from backend.plan.checks.context import KEEP_MTP_ENV, Check, LayoutContext
from backend.plan.checks.values import alts, near


def _c2(c: LayoutContext) -> None:
    if not c.uneven_args and c.layers % c.pp:
        c.add(
            "C2",
            f"{c.layers} layers do not split evenly over PP = {c.pp} "
            "('Number of layers should be divisible by the pipeline-model-parallel size')",
            f"use train.pp {alts(near(c.legal_pp(), c.pp))}",
        )


def _c3(c: LayoutContext) -> None:
    need = 1 if c.overlap_p2p else 2
    if c.vpp is not None and c.pp <= need:
        why = "" if c.overlap_p2p else " with p2p overlap disabled"
        c.add(
            "C3",
            f"train.vpp = {c.vpp} with PP = {c.pp}: validate_args requires PP > {need} for an interleaved "
            f"schedule{why}",
            "unset train.vpp (the hybrid stack forbids VPP anyway, see D7)",
        )


def _c4(c: LayoutContext) -> None:
    if c.ep > 1 and c.experts % c.ep:
        c.add(
            "C4",
            f"EP = {c.ep} does not divide the {c.experts} experts "
            "('Number of experts should be a multiple of expert model parallel_size')",
            f"use train.ep {alts(near(c.legal_ep(), c.ep))}",
        )


def _c5(c: LayoutContext) -> None:
    if c.sp_raw is True and c.tp == 1:
        c.add(
            "C5",
            "train.sequence_parallel = true at TP = 1: Megatron silently turns it off "
            "('Disabling sequence parallelism because tensor model parallelism is disabled')",
            "unset train.sequence_parallel (on iff TP > 1) or set it to false",
        )


def _c8(c: LayoutContext) -> None:
    if c.dp is not None and c.gbs % (c.mbs * c.dp):
        step = c.mbs * c.dp
        lo = max(step, c.gbs // step * step)
        c.add(
            "C8",
            f"global batch {c.gbs} is not divisible by micro batch {c.mbs} × DP {c.dp} = {step} "
            f"('global batch size ({c.gbs}) is not divisible by micro batch size ({c.mbs}) times data "
            f"parallel size ({c.dp})')",
            f"use batch.global_batch_size {alts(sorted({lo, lo + step}))}",
        )


def _c10(c: LayoutContext) -> None:
    if c.keep_mtp and c.mtp_layers and c.pos_emb not in ("rope", "none"):
        c.add(
            "C10",
            f"the MTP head is kept ({KEEP_MTP_ENV}) but position embedding is '{c.pos_emb}': MTP "
            "supports only rope or none",
            f'drop {KEEP_MTP_ENV} from run.extra_env, or use model.position_embedding_type = "none"',
        )


def _c11(c: LayoutContext) -> None:
    if c.cdmc is not None and c.cdmc.strip() != "1" and (c.tp > 1 or c.cp > 1):
        c.add(
            "C11",
            f"run.extra_env sets CUDA_DEVICE_MAX_CONNECTIONS = {c.cdmc!r} with TP = {c.tp}, CP = {c.cp}: "
            "Megatron requires 1 when tensor or context parallelism is on",
            "remove CUDA_DEVICE_MAX_CONNECTIONS from run.extra_env (the job sets it to 1)",
            ("run.extra_env", "train.tp", "train.cp"),
        )


CHECKS: dict[str, Check] = {"C2": _c2, "C3": _c3, "C4": _c4, "C5": _c5, "C8": _c8, "C10": _c10, "C11": _c11}
