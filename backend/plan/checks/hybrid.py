"""Catalog section D: the hybrid (Mamba) stack.

TP over Mamba heads and groups, the hybrid pattern's length, and what the Mamba stack of miles'
Megatron fork does with pipeline splits (no virtual pipeline; first/last-stage sizes ignored).
"""

from __future__ import annotations

from backend.plan.checks.context import Check, LayoutContext
from backend.plan.checks.values import alts, divisors, near
from backend.severity import Severity

MTP_SYMBOLS = frozenset("MG*D+-E")  # layer symbols an MTP pattern may use


def _d1(c: LayoutContext) -> None:
    if c.has_mamba and c.m_heads % c.tp:
        c.add(
            "D1",
            f"TP = {c.tp} does not divide the {c.m_heads} Mamba heads ('nheads must be evenly divisble "
            "by tp_size')",
            f"TP must divide Mamba heads={c.m_heads}: use {alts(near(c.legal_tp(), c.tp))}",
        )


def _d2(c: LayoutContext) -> None:
    if c.has_mamba and c.m_groups % c.tp:
        c.add(
            "D2",
            f"TP = {c.tp} does not divide the {c.m_groups} Mamba groups ('ngroups must be evenly "
            "divisible by tp_size'); this caps attention/Mamba TP",
            f"TP must divide Mamba n_groups={c.m_groups}: use {alts(near(c.legal_tp(), c.tp))}",
        )


def _d3(c: LayoutContext) -> None:
    if c.has_mamba and c.m_heads % c.m_groups:
        c.add(
            "D3",
            f"{c.m_heads} Mamba heads do not split into {c.m_groups} groups ('nheads must be evenly "
            "divisible by ngroups')",
            f"use model.mamba_num_groups {alts(near(divisors(c.m_heads), c.m_groups))}",
        )


def _d5(c: LayoutContext) -> None:
    if len(c.pattern) != c.layers:
        c.add(
            "D5",
            f"model.hybrid_pattern has {len(c.pattern)} layers but model.num_layers = {c.layers} "
            f"('The hybrid override pattern is the wrong length: got {len(c.pattern)}, expected {c.layers}')",
            f"set model.num_layers = {len(c.pattern)} or give a pattern of {c.layers} symbols",
        )


def _d7(c: LayoutContext) -> None:
    if c.vpp is not None:
        c.add(
            "D7",
            f"train.vpp = {c.vpp}: the Mamba hybrid stack does not support virtual/interleaved pipeline "
            "parallelism (neither does Megatron-Bridge's hybrid provider)",
            "unset train.vpp",
            ("train.vpp",),
        )
    if c.uneven_args and c.pp > 1:
        per = c.layers // c.pp
        fields = (
            "train.decoder_first_pipeline_num_layers",
            "train.decoder_last_pipeline_num_layers",
            "train.pp",
        )
        if c.layers % c.pp:
            c.add(
                "D7",
                f"{c.layers} layers over PP = {c.pp}: with first/last-stage sizes or train.vpp given, "
                "validate_args skips its even-split check, and the Mamba stack of miles' Megatron fork gives "
                f"every stage ⌊{c.layers}/{c.pp}⌋ = {per} layers, dropping the last {c.layers - per * c.pp}",
                f"use train.pp {alts(near(c.legal_pp(), c.pp))} and unset the first/last-stage sizes and "
                "train.vpp",
                (*fields, "train.vpp", "model.num_layers"),
            )
        elif c.first is not None or c.last is not None:
            c.add(
                "D7",
                f"first/last-stage sizes ({c.first}/{c.last}) are ignored by the Mamba stack of miles' "
                f"Megatron fork: every stage gets {per} layers",
                "unset train.decoder_first_pipeline_num_layers and train.decoder_last_pipeline_num_layers",
                fields,
                Severity.WARNING,
            )


def _d10(c: LayoutContext) -> None:
    bad = set(c.mtp_pattern) - MTP_SYMBOLS
    if c.mtp_layers and bad:
        c.add(
            "D10",
            f"model.mtp_pattern {c.mtp_pattern!r} has unknown layer symbols {''.join(sorted(bad))!r}",
            'use the checkpoint\'s MTP pattern ("*E") built from M, *, E, -',
        )


CHECKS: dict[str, Check] = {"D1": _d1, "D2": _d2, "D3": _d3, "D5": _d5, "D7": _d7, "D10": _d10}
