"""Catalog section H: miles' own arguments.

miles' asserts and silent overrides: rollout dp, the colocated pool, engines tiling the pool, the
batch arithmetic, dynamic batching, first/last stages at PP = 1, and the launcher script's layout table
(info only: ultra-console submits train.py directly).
"""

from __future__ import annotations

import shlex
from typing import Any

from backend.plan import miles_flags
from backend.plan.checks.context import Check, LayoutContext
from backend.plan.checks.values import alts, divisors, near
from backend.plan.simulation import is_simulated
from backend.severity import Severity


def _h2(c: LayoutContext) -> None:
    if c.rdp > 1 and not c.dpa:
        c.add(
            "H2",
            f"rollout dp {c.rdp} without DP-attention: miles asserts sglang_enable_dp_attention when "
            "sglang_dp_size > 1",
            "set rollout.enable_dp_attention = true (or rollout.dp = 1)",
        )


def _h3(c: LayoutContext) -> None:
    if c.colocate and c.num_gpus is not None and c.num_gpus != c.W:
        c.add(
            "H3",
            f"rollout.num_gpus = {c.num_gpus} but colocated rollout always uses all {c.W} training GPUs: "
            f"miles overrides it to {c.W}",
            f"unset rollout.num_gpus (or set it to {c.W})",
            ("rollout.num_gpus", "rollout.colocate"),
            Severity.WARNING,
        )
    elif not c.colocate and c.num_gpus is None:
        c.add(
            "H3",
            f"non-colocated rollout without rollout.num_gpus: miles places the {c.W} training GPUs but "
            "has no GPU count for the engines (its placement arithmetic fails)",
            f"set rollout.num_gpus (e.g. {c.W}) or rollout.colocate = true",
            ("rollout.num_gpus", "rollout.colocate"),
            Severity.ERROR,
        )


def _h4(c: LayoutContext) -> None:
    R = c.R
    if R is None:
        return
    if R < c.g:
        c.add(
            "H4",
            f"the rollout pool has {R} GPUs, fewer than one {c.g}-GPU engine: no engine can start",
            f"use rollout.gpus_per_engine {alts(near(c.engine_sizes(R), c.g))}",
            severity=Severity.ERROR,
        )
    elif R % c.g:
        c.add(
            "H4",
            f"{R} rollout GPUs do not divide into {c.g}-GPU engines: {R // c.g} engines, {R % c.g} GPUs "
            "left without a complete engine (miles floors; the launcher would assert)",
            f"use rollout.gpus_per_engine {alts(near(c.engine_sizes(R), c.g))}",
            severity=Severity.WARNING,
        )


def _h6(c: LayoutContext) -> None:
    samples = c.rbs * c.n
    if c.steps is not None:
        want = samples // c.steps
        if c.gbs != want:
            c.add(
                "H6",
                f"global batch {c.gbs} ≠ rollout batch {c.rbs} × {c.n} samples // {c.steps} steps = {want} "
                "(miles asserts this when num_steps_per_rollout is set)",
                f"set batch.global_batch_size = {want} or unset batch.num_steps_per_rollout",
                severity=Severity.ERROR,
            )
    elif samples < c.gbs:
        c.add(
            "H6",
            f"a rollout yields {c.rbs} × {c.n} = {samples} samples, fewer than the global batch {c.gbs}: "
            f"training raises 'Not enough samples {samples} for global_batch_size {c.gbs}'",
            f"use batch.global_batch_size {alts(near(divisors(samples), c.gbs, 3))} (at most {samples})",
            ("batch.global_batch_size", "batch.rollout_batch_size", "batch.n_samples_per_prompt"),
            Severity.ERROR,
        )
    elif samples % c.gbs:
        c.add(
            "H6",
            f"{samples} samples per rollout are not a multiple of the global batch {c.gbs}: "
            f"{samples % c.gbs} samples are trimmed every rollout",
            f"use batch.global_batch_size {alts(near(divisors(samples), c.gbs, 3))}",
            ("batch.global_batch_size", "batch.rollout_batch_size", "batch.n_samples_per_prompt"),
            Severity.WARNING,
        )


def _h7(c: LayoutContext) -> None:
    if c.osb is not None and c.osb < c.rbs:
        c.add(
            "H7",
            f"over_sampling_batch_size {c.osb} is below rollout_batch_size {c.rbs}",
            f"set batch.over_sampling_batch_size ≥ {c.rbs} or unset it",
        )


def _h8(c: LayoutContext) -> None:
    if c.dyn and c.max_tokens is None:
        c.add(
            "H8",
            "dynamic batch size is on but batch.max_tokens_per_gpu is unset "
            "('max_tokens_per_gpu must be set when use_dynamic_batch_size is set')",
            "set batch.max_tokens_per_gpu = 1024 (the recipe's)",
        )


def _h10(c: LayoutContext) -> None:
    if c.pp == 1 and (c.first is not None or c.last is not None):
        c.add(
            "H10",
            "first/last pipeline-stage sizes are set with PP = 1 (miles: 'should be None when "
            "pipeline_model_parallel_size is 1')",
            "unset train.decoder_first_pipeline_num_layers and train.decoder_last_pipeline_num_layers",
        )


_LAUNCHER_FIELDS = {
    "GPUs": ("cluster.nodes", "cluster.gpus_per_node"),
    "tp": ("train.tp",),
    "pp": ("train.pp",),
    "ep": ("train.ep",),
    "etp": ("train.etp",),
    "gpus_per_engine": ("rollout.gpus_per_engine",),
    "rollout dp": ("rollout.dp",),
    "rollout ep": ("rollout.ep",),
    "mem_fraction": ("rollout.mem_fraction",),
}


def _launcher_table(c: LayoutContext) -> dict[str, tuple[Any, Any]]:
    """spec value vs. what run_nemotron_3_ultra_550b_a55b.py would use, for the values that differ."""
    if c.m.is_slice:
        want = {
            "tp": 1,
            "pp": 1,
            "ep": c.W,
            "etp": 1,
            "gpus_per_engine": c.gpn,
            "rollout dp": 2,
            "rollout ep": c.gpn,
            "mem_fraction": 0.6,
        }
    else:
        want = {
            "GPUs": 128,
            "tp": 8,
            "pp": 4,
            "ep": 32,
            "etp": 1,
            "gpus_per_engine": 32,
            "rollout dp": 4,
            "rollout ep": 32,
            "mem_fraction": 0.7,
        }
    have = {
        "GPUs": c.W,
        "tp": c.tp,
        "pp": c.pp,
        "ep": c.ep,
        "etp": c.etp_raw,
        "gpus_per_engine": c.g,
        "rollout dp": c.rdp,
        "rollout ep": c.rep,
        "mem_fraction": c.mem_fraction,
    }
    return {k: (have[k], v) for k, v in want.items() if have[k] != v}


def _h12(c: LayoutContext) -> None:
    diff = _launcher_table(c)
    if diff:
        shown = ", ".join(f"{k} {'unset' if h is None else h} (launcher: {w})" for k, (h, w) in diff.items())
        fields = tuple(f for k in diff for f in _LAUNCHER_FIELDS[k])
        c.add(
            "H12",
            f"miles' launcher script would refuse or not offer this layout ({shown}); "
            "ultra-console submits train.py directly, so only the rules of the real stack apply",
            "",
            fields,
        )


SIM_PREFIXES = ("--sim-",)


def _extra_tokens(c: LayoutContext) -> list[str]:
    try:
        return shlex.split(c.extra_args)
    except ValueError:
        return []  # the submission refuses unbalanced quotes with its own one-line error


def _h13(c: LayoutContext) -> None:
    tokens = _extra_tokens(c)
    if not tokens:
        return
    simulated = is_simulated(c.spec.paths.train_script)  # the simulator also takes its own --sim-* flags
    problems = miles_flags.extra_args_problems(tokens, SIM_PREFIXES if simulated else ())
    for problem in problems:
        c.add(
            "H13",
            f"run.extra_args: {problem}: miles' parser exits before the job starts",
            "fix or remove it in run.extra_args (the flags are those of configs/miles/args.toml)",
        )


def _plan_flags(c: LayoutContext) -> set[str]:
    from backend.plan.submission import train_argv  # the argv this plan emits, without the extra args

    plan = c.spec.model_copy(update={"run": c.spec.run.model_copy(update={"extra_args": ""})})
    return {t for t in train_argv(plan, "000000-000000-000") if t.startswith("--")}


def _h14(c: LayoutContext) -> None:
    tokens = {t.partition("=")[0] for t in _extra_tokens(c) if t.startswith("--")}
    if not tokens:
        return
    plan = {miles_flags.dest_of(t) for t in _plan_flags(c)} - {None}
    repeated = sorted(t for t in tokens if miles_flags.dest_of(t) in plan)
    if repeated:
        c.add(
            "H14",
            f"run.extra_args sets {', '.join(map(repr, repeated))}, which the plan sets from its fields: "
            "miles uses the extra value, not the one the plan shows",
            "set the plan's field instead and drop the flag from run.extra_args",
        )


def _h15(c: LayoutContext) -> None:
    if c.dyn and c.mbs_raw != 1:
        c.add(
            "H15",
            f"micro batch {c.mbs_raw} → 1: dynamic batch size forces 1 (--micro-batch-size is not passed; "
            "batches are packed up to batch.max_tokens_per_gpu)",
            "set train.micro_batch_size = 1, or train.use_dynamic_batch_size = false to use it",
        )


CHECKS: dict[str, Check] = {
    "H2": _h2,
    "H3": _h3,
    "H4": _h4,
    "H6": _h6,
    "H7": _h7,
    "H8": _h8,
    "H10": _h10,
    "H12": _h12,
    "H13": _h13,
    "H14": _h14,
    "H15": _h15,
}
