"""Catalog section B: the model-parallel config.

What TransformerConfig checks when the model is built: heads and query groups over TP, sequence
parallelism with MoE, the uneven-pipeline arithmetic, dispatcher and shared-expert overlap, router
groups and recompute settings.
"""

from __future__ import annotations

from backend.plan.checks.context import Check, LayoutContext
from backend.plan.checks.values import alts, divisors, near
from backend.severity import Severity


def _b1(c: LayoutContext) -> None:
    if c.heads % c.tp:
        c.add(
            "B1",
            f"TP = {c.tp} does not divide the {c.heads} attention heads "
            f"('num_attention_heads ({c.heads}) must be a multiple of tensor_model_parallel_size ({c.tp})')",
            f"use train.tp {alts(near(c.legal_tp(), c.tp))}",
        )


def _b2(c: LayoutContext) -> None:
    if c.groups % c.tp and c.tp % c.groups:
        c.add(
            "B2",
            f"TP = {c.tp} is neither a multiple nor a divisor of the {c.groups} GQA query groups",
            f"use train.tp {alts(near(c.legal_tp(), c.tp))}",
        )


def _b4(c: LayoutContext) -> None:
    if c.has_moe and c.ep > 1 and c.tp > 1 and not c.sp:
        c.add(
            "B4",
            f"EP = {c.ep} and TP = {c.tp} with sequence parallelism off: Megatron warns at config time "
            "'sequence parallelism must be used' (and the first training step then fails, see E2)",
            "set train.sequence_parallel = true (or leave it unset: on iff TP > 1)",
        )


def _b7(c: LayoutContext) -> None:
    """TransformerConfig's uneven-PP arithmetic, step for step (it runs even at PP = 1)."""
    first, last = c.first, c.last
    if first is None and last is None:
        return
    layers, stages = c.layers, c.pp
    for name, val in (
        ("decoder_first_pipeline_num_layers", first),
        ("decoder_last_pipeline_num_layers", last),
    ):
        if val is None:
            continue
        if _b7_edge_refused(c, name, val):
            return
        layers -= val
        stages -= 1
    _b7_middle(c, layers, stages)


_B7_FIELDS = ("train.decoder_first_pipeline_num_layers", "train.decoder_last_pipeline_num_layers", "train.pp")


def _b7_edge_refused(c: LayoutContext, name: str, val: int) -> bool:
    """A first or last stage sized by hand that TransformerConfig refuses on its own (said when it does)."""
    if val <= 0:
        c.add(
            "B7",
            f"train.{name} = {val}: a pipeline stage must hold at least one layer",
            f"set train.{name} to 1..{c.layers - 1} or unset it",
            _B7_FIELDS,
        )
        return True
    if c.vpp is not None and val % c.vpp:
        c.add(
            "B7",
            f"train.{name} = {val} is not divisible by the virtual pipeline degree {c.vpp}",
            "unset train.vpp (D7)",
            (*_B7_FIELDS, "train.vpp"),
        )
        return True
    return False


def _b7_middle(c: LayoutContext, layers: int, stages: int) -> None:
    """The layers left for the middle stages must split evenly over them (and over the virtual stages)."""
    first, last, vpp, fields = c.first, c.last, c.vpp, _B7_FIELDS
    fix = (
        f"pick first/last so that {c.layers} − first − last splits evenly over the middle stages, or unset "
        "both (miles' fork ignores them anyway, see D7)"
    )
    what = (
        f"{c.layers} layers with first stage {first} and last stage {last} leave {layers} layers for "
        f"{stages} middle stage(s) of PP = {c.pp}"
    )
    if bool(layers) != bool(stages):
        c.add(
            "B7",
            f"{what}: 'Mismatch: {layers} middle layers remaining but {stages} middle PP stages available'",
            fix,
            fields,
        )
    elif stages and layers % stages:
        c.add("B7", f"{what}: they must split evenly", fix, fields)
    elif stages and vpp is not None and (layers // stages) % vpp:
        c.add(
            "B7",
            f"{what}: {layers // stages} layers per middle stage are not divisible by the virtual "
            f"pipeline degree {vpp}",
            "unset train.vpp (D7)",
            (*fields, "train.vpp"),
        )


def _b10(c: LayoutContext) -> None:
    if c.dispatcher == "allgather" and c.has_moe:
        c.add(
            "B10",
            "train.moe_token_dispatcher = 'allgather': miles silently switches it to 'alltoall'",
            'set train.moe_token_dispatcher = "alltoall"',
            ("train.moe_token_dispatcher",),
            Severity.WARNING,
        )
    effective = "alltoall" if c.dispatcher == "allgather" else c.dispatcher
    if c.overlap and not c.latent and effective != "alltoall":
        c.add(
            "B10",
            f"moe_shared_expert_overlap with the '{effective}' dispatcher: miles' Megatron fork only "
            "supports it with 'alltoall'",
            'set train.moe_token_dispatcher = "alltoall" or train.moe_shared_expert_overlap = false',
        )


def _b11(c: LayoutContext) -> None:
    if c.overlap and c.latent:
        c.add(
            "B11",
            f"moe_shared_expert_overlap = true with latent MoE (moe_latent_size = {c.latent}): miles "
            "forces it off (the fork cannot overlap shared experts with latent projections)",
            "set train.moe_shared_expert_overlap = false",
        )


def _b12(c: LayoutContext) -> None:
    if c.has_moe and c.bias and c.etp != 1:
        c.add(
            "B12",
            f"MoE with bias (model.add_bias_linear) needs ETP = 1, got ETP = {c.etp}"
            + (" (unset ⇒ TP)" if c.etp_raw is None else ""),
            "set train.etp = 1",
        )


def _b13(c: LayoutContext) -> None:
    if not c.has_moe:
        return
    if c.experts % c.n_group:
        c.add(
            "B13",
            f"{c.experts} experts are not divisible by the {c.n_group} router groups (model.n_group)",
            f"use model.n_group {alts(near(divisors(c.experts), c.n_group))}",
        )
    elif c.topk_group > c.n_group:
        c.add(
            "B13",
            f"router group top-k {c.topk_group} exceeds the {c.n_group} router groups",
            f"set model.topk_group to 1..{c.n_group}",
        )


def _b14(c: LayoutContext) -> None:
    gran, method, n = c.rec_gran, c.rec_method, c.rec_n
    if gran == "full":
        if method is None:
            c.add(
                "B14",
                "recompute granularity 'full' needs a recompute method",
                'set train.recompute_method = "uniform" (the recipe\'s) or "block"',
            )
        if n is None:
            per = c.layers // c.pp
            c.add(
                "B14",
                f"recompute granularity 'full' needs recompute_num_layers (1..{per} layers per stage)",
                "set train.recompute_num_layers = 1 (the recipe's)",
            )
    elif gran == "selective":
        if n is not None:
            c.add(
                "B14",
                f"recompute granularity 'selective' forbids recompute_num_layers (got {n})",
                "unset train.recompute_num_layers",
                ("train.recompute_granularity", "train.recompute_num_layers"),
            )
        if method is not None:
            c.add(
                "B14",
                f"recompute granularity 'selective' does not take a recompute method (got '{method}')",
                "unset train.recompute_method",
                ("train.recompute_granularity", "train.recompute_method"),
            )


CHECKS: dict[str, Check] = {
    "B1": _b1,
    "B2": _b2,
    "B4": _b4,
    "B7": _b7,
    "B10": _b10,
    "B11": _b11,
    "B12": _b12,
    "B13": _b13,
    "B14": _b14,
}
