"""Seeded random layouts of the Ultra presets: the differential deep test checks our rule engine against
the real libraries on them, and bench/bench_deep.py times the checks on the same ones."""

from __future__ import annotations

import random
from typing import Any

from backend.errors import SpecError
from backend.plan.spec import build_spec

FULL = "nemotron-3-ultra-550b-a55b"
SLICE = "nemotron-3-ultra-550b-a55b-4layer"
SEED = 20261130
N_LAYOUTS = 200


def random_overrides(rng: random.Random) -> tuple[str, list[str]]:
    preset = rng.choice([FULL, FULL, SLICE])
    nodes = rng.choice([1, 2, 3, 4, 6, 8, 16, 16])
    sets: dict[str, Any] = {
        "cluster.nodes": nodes,
        "train.tp": rng.choice([1, 2, 4, 8, 8, 16, 3]),
        "train.pp": rng.choice([1, 1, 2, 3, 4, 4, 5, 6]),
        "train.cp": rng.choice([1, 1, 1, 2]),
        "train.ep": rng.choice([1, 2, 4, 8, 16, 32, 64, 7, 24]),
        "train.etp": rng.choice(["none", 1, 1, 2, 4, 8]),
        "train.vpp": rng.choice(["none"] * 5 + [2]),
        "train.micro_batch_size": rng.choice([1, 1, 2]),
        "batch.global_batch_size": rng.choice([128, 128, 64, 96, 130, 256]),
        "rollout.gpus_per_engine": rng.choice([4, 8, 8, 16, 24, 32]),
        "rollout.dp": rng.choice([1, 2, 2, 4, 3]),
    }
    sets["rollout.ep"] = rng.choice(
        [1, sets["rollout.gpus_per_engine"], sets["rollout.gpus_per_engine"], 8, 24]
    )
    if rng.random() < 0.1 and sets["train.pp"] > 1:
        sets["train.decoder_first_pipeline_num_layers"] = rng.choice([1, 2, 26, 27, 30])
    if rng.random() < 0.05 and sets["train.pp"] > 1:
        sets["train.decoder_last_pipeline_num_layers"] = rng.choice([1, 26, 27])
    if rng.random() < 0.15:  # group-limited routing (B13)
        sets["model.n_group"] = rng.choice([1, 2, 3, 8])
        sets["model.topk_group"] = rng.choice([1, 2, 4])
    if rng.random() < 0.1:  # GQA groups vs TP (B2)
        sets["model.num_query_groups"] = rng.choice([2, 4, 3, 16])
    if rng.random() < 0.1:  # dp without dp-attention (H2 / G3)
        sets["rollout.enable_dp_attention"] = False
    if rng.random() < 0.1:
        sets["cluster.gpus_per_node"] = 4
    if rng.random() < 0.15:  # recompute settings (B14)
        sets["train.recompute_method"] = rng.choice(["uniform", "block"])
        sets["train.recompute_num_layers"] = rng.choice([1, 2, 27, 40])
    return preset, [f"{k}={v}" for k, v in sets.items()]


def layouts() -> list[tuple[str, list[str]]]:
    rng = random.Random(SEED)
    out: list[tuple[str, list[str]]] = []
    while len(out) < N_LAYOUTS:
        preset, sets = random_overrides(rng)
        try:
            build_spec(preset, sets)
        except SpecError:
            continue
        out.append((preset, sets))
    return out
