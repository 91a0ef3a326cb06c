"""Parse the part of miles' train.py argv the simulator needs; everything else is ignored.

The simulator receives exactly what `backend.plan.submission` builds for miles, so unknown flags
(model architecture, sglang, optimizer...) must pass through silently.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

LOG_FORMATS = ("newest", "2026-04", "bare")  # see milog.py for what each prints
# how the run dies (`--sim-fail`; deaths.py prints each as the real libraries do): `error` a plain
# RuntimeError in train(), then the shapes of miles-log-formats.md §3 and §3b the console must name;
# `c10d-unreachable` a rank that cannot reach the c10d store's address; `incident` a caught error the run
# outlives (it goes on and succeeds: no cause, one incident)
FAIL_KINDS = (
    "error",
    "train-oom",
    "engine-start",
    "host-oom",
    "nccl-timeout",
    "c10d-unreachable",
    "incident",
)
NEEDS_RAY = ("host-oom",)  # Ray's OOM killer has no meaning without Ray (`--sim-log-format bare`)


@dataclass(frozen=True)
class SimArgs:
    num_rollout: int
    rollout_batch_size: int
    n_samples_per_prompt: int
    global_batch_size: int
    num_steps_per_rollout: int | None
    actor_num_nodes: int
    actor_num_gpus_per_node: int
    tp: int
    pp: int
    lr: float
    save: str | None
    save_interval: int | None
    eval_interval: int | None
    eval_name: str | None
    log_passrate: bool
    dump_details: str | None
    max_response_len: int
    load: str | None
    wandb_group: str | None
    use_miles_dashboard: bool
    dashboard_flush_interval: float
    dashboard_gpu_sample_interval: float
    # simulation controls
    step_seconds: float
    fail: str | None
    fail_at_rollout: int
    ignore_sigterm: bool
    ignore_sigint: bool
    forever: bool
    nan_at_step: int | None
    hold_gpu_mib: int
    leak_gpu_process: bool
    log_format: str
    oom_gpu: int
    fail_rank: int | None
    nccl_timeout_s: float
    unreadable_metrics: bool
    shim_off_rank: int | None = None  # this train actor's worker starts without the shim's setup hook
    straggler_rank: int | None = None
    straggler_seconds: float = 3.0
    hang_rank: int | None = None
    kl_spike_at_rollout: int | None = None  # that rollout's train steps log a KL far above its median
    nan_grad_at_step: int | None = None  # that one step's grad norm is NaN (a skipped step the run outlives)
    ckpt_step: int | None = (
        None  # Megatron's --ckpt-step: the iteration of --load to load (None: the tracker's)
    )
    max_tokens_per_gpu: int | None = None
    oom_above_tokens: int | None = (
        None  # train-oom only while --max-tokens-per-gpu is above this (a fix works)
    )

    @property
    def oom_at_rollout(self) -> int | None:
        """The rollout whose train() dies of CUDA OOM (`--sim-oom-at-rollout N`, `--sim-fail train-oom`)."""
        return self.fail_at_rollout if self.fail == "train-oom" else None

    def fails_at(self, kind: str, rollout_id: int) -> bool:
        if kind == "train-oom" and self.oom_above_tokens is not None:
            tokens = self.max_tokens_per_gpu
            if tokens is not None and tokens <= self.oom_above_tokens:
                return False  # the resumed attempt's smaller micro-batches fit
        return self.fail == kind and rollout_id == self.fail_at_rollout

    @property
    def culprit_rank(self) -> int:
        """The rank that hangs outside the collective in
        `nccl-timeout` (the others time out waiting on it)."""
        return self.world_size - 1 if self.fail_rank is None else self.fail_rank

    @property
    def world_size(self) -> int:
        return self.actor_num_nodes * self.actor_num_gpus_per_node

    @property
    def steps_per_rollout(self) -> int:
        """miles: local samples // (global_batch_size / dp) == rbs * n / gbs on one replica."""
        if self.num_steps_per_rollout:
            return self.num_steps_per_rollout
        return max(1, self.rollout_batch_size * self.n_samples_per_prompt // max(1, self.global_batch_size))

    @property
    def metric_rank(self) -> int:
        """Rank printing metric lines: first rank of the last PP stage (tp-cp-ep-dp-pp order)."""
        return self.world_size - self.world_size // max(1, self.pp)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simtrainer", allow_abbrev=False, add_help=False)
    p.add_argument("--num-rollout", type=int, default=3)
    p.add_argument("--rollout-batch-size", type=int, default=8)
    p.add_argument("--n-samples-per-prompt", type=int, default=2)
    p.add_argument("--global-batch-size", type=int, default=16)
    p.add_argument("--num-steps-per-rollout", type=int, default=None)
    p.add_argument("--actor-num-nodes", type=int, default=1)
    p.add_argument("--actor-num-gpus-per-node", type=int, default=8)
    p.add_argument("--tensor-model-parallel-size", dest="tp", type=int, default=1)
    p.add_argument("--pipeline-model-parallel-size", dest="pp", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--save", default=None)
    p.add_argument("--save-interval", type=int, default=None)
    p.add_argument("--eval-interval", type=int, default=None)
    p.add_argument("--eval-prompt-data", nargs="+", default=None)
    p.add_argument("--log-passrate", action="store_true")
    p.add_argument("--dump-details", default=None)
    p.add_argument("--rollout-max-response-len", dest="max_response_len", type=int, default=256)
    p.add_argument("--load", default=None)
    p.add_argument("--ckpt-step", dest="ckpt_step", type=int, default=None)
    p.add_argument("--max-tokens-per-gpu", dest="max_tokens_per_gpu", type=int, default=None)
    p.add_argument("--wandb-group", default=None)
    # miles/dashboard/args.py: the live dashboard streams under {dump_details}/dashboard/
    p.add_argument("--use-miles-dashboard", action="store_true")
    p.add_argument("--dashboard-flush-interval", type=float, default=5.0)
    p.add_argument("--dashboard-gpu-sample-interval", type=float, default=1.0)
    p.add_argument("--sim-step-seconds", dest="step_seconds", type=float, default=1.0)
    p.add_argument("--sim-fail", dest="fail", choices=FAIL_KINDS, default=None)
    p.add_argument("--sim-fail-at-rollout", dest="fail_at_rollout", type=int, default=None)
    p.add_argument("--sim-fail-rank", dest="fail_rank", type=int, default=None)
    p.add_argument("--sim-nccl-timeout-s", dest="nccl_timeout_s", type=float, default=2.0)
    p.add_argument("--sim-ignore-sigterm", dest="ignore_sigterm", action="store_true")
    p.add_argument("--sim-ignore-sigint", dest="ignore_sigint", action="store_true")
    p.add_argument("--sim-forever", dest="forever", action="store_true")
    p.add_argument("--sim-nan-at-step", dest="nan_at_step", type=int, default=None)
    p.add_argument("--sim-hold-gpu-mib", dest="hold_gpu_mib", type=int, default=60000)
    p.add_argument("--sim-leak-gpu-process", dest="leak_gpu_process", action="store_true")
    p.add_argument("--sim-log-format", dest="log_format", choices=LOG_FORMATS, default="newest")
    p.add_argument("--sim-oom-at-rollout", dest="oom_at_rollout", type=int, default=None)
    p.add_argument("--sim-oom-gpu", dest="oom_gpu", type=int, default=3)
    p.add_argument("--sim-unreadable-metrics", dest="unreadable_metrics", action="store_true")
    p.add_argument("--sim-shim-off-rank", dest="shim_off_rank", type=int, default=None)
    # rank N's train phase ends this much later than its peers' (its actor stretches the step for everyone)
    p.add_argument("--sim-straggler-rank", dest="straggler_rank", type=int, default=None)
    p.add_argument("--sim-straggler-seconds", dest="straggler_seconds", type=float, default=3.0)
    # from the second rollout on, the actor of rank N blocks in simulated_stuck_recv, every other train actor
    # in simulated_allreduce_wait (what a real hang looks
    # like: one rank elsewhere, the rest in the collective)
    p.add_argument("--sim-hang-rank", dest="hang_rank", type=int, default=None)
    # the train steps of rollout N log train/ppo_kl at KL_SPIKE (the steps after it are ordinary again): the
    # kl-spike alert fires once and clears once
    p.add_argument("--sim-kl-spike-at-rollout", dest="kl_spike_at_rollout", type=int, default=None)
    # step N alone logs a NaN grad norm (its loss finite): miles skips that step and goes on, an incident
    p.add_argument("--sim-nan-grad-at-step", dest="nan_grad_at_step", type=int, default=None)
    # --sim-fail train-oom fires only while --max-tokens-per-gpu is above N: the fix a resume proposes works
    p.add_argument("--sim-oom-above-tokens", dest="oom_above_tokens", type=int, default=None)
    return p


def parse(argv: Sequence[str]) -> SimArgs:
    """miles' argv plus the `--sim-*` controls. A bad value of a `--sim-*` flag exits 2 with argparse's
    one-line message, like miles' own argument errors.

    `--sim-fail KIND` dies that way at rollout `--sim-fail-at-rollout` (default 0; the kinds that die at
    start ignore it); `--sim-fail-at-rollout N` alone is `--sim-fail error`, and `--sim-oom-at-rollout N`
    is `--sim-fail train-oom --sim-fail-at-rollout N` (both kept from before `--sim-fail`)."""
    parser = _parser()
    ns, _unknown = parser.parse_known_args(list(argv))
    _resolve_fail(parser, ns)
    _check(parser, ns)
    eval_name = ns.eval_prompt_data[0] if ns.eval_prompt_data else None
    values = {
        k: v
        for k, v in vars(ns).items()
        if k not in ("eval_prompt_data", "oom_at_rollout", "fail_at_rollout")
    }
    return SimArgs(eval_name=eval_name, fail_at_rollout=ns.fail_at_rollout or 0, **values)


def _resolve_fail(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """The older spellings as `--sim-fail`: `--sim-oom-at-rollout N` and `--sim-fail-at-rollout N` alone."""
    if ns.oom_at_rollout is not None:
        if ns.fail not in (None, "train-oom") or ns.fail_at_rollout not in (None, ns.oom_at_rollout):
            parser.error(
                "--sim-oom-at-rollout N is --sim-fail train-oom --sim-fail-at-rollout N: give one of them"
            )
        ns.fail, ns.fail_at_rollout = "train-oom", ns.oom_at_rollout
    if ns.fail is None and ns.fail_at_rollout is not None:
        ns.fail = "error"


def _check(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """Refuse `--sim-*` values that cannot run (exit 2, argparse's one line)."""
    if ns.fail in NEEDS_RAY and ns.log_format == "bare":
        parser.error(f"--sim-fail {ns.fail} needs Ray: not with --sim-log-format bare")
    if ns.nccl_timeout_s <= 0:
        parser.error("--sim-nccl-timeout-s must be > 0")
    world = ns.actor_num_nodes * ns.actor_num_gpus_per_node
    if ns.fail_rank is not None and not 0 <= ns.fail_rank < world:
        parser.error(f"--sim-fail-rank must be a rank of the {world}-GPU training world")
