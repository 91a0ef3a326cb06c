"""A faithful fake of a miles GRPO Ray job log, for the grammar's tests and the log benchmarks.

Lines are written exactly as miles' logging (miles/utils/logging_utils.py) and Ray's driver
(`print_worker_logs`) print them: ANSI-coloured `(Actor pid=N[, ip=X])` prefixes,
miles' `[YYYY-mm-dd HH:MM:SS.mmm name] file.py:NN - ` bracket, `step N` twice per step (log_utils.py:542
and model.py:854), both `perf N` kinds, `np.float64(...)` pass@k, `np.int64(...)` multi-turn maxima, bare
`nan`, a `\\r` tqdm bar, Ray's `[repeated Nx across cluster]` dedup suffix, SGLang noise, Timer lines,
checkpoint saves, and Megatron's argument dump. Worker output arrives out of timestamp order, as in Ray.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

DIM, CYAN, GREEN, RESET = "\x1b[2m", "\x1b[36m", "\x1b[32m", "\x1b[0m"
BASE = datetime(2026, 8, 21, 10, 0, 0, tzinfo=UTC)


@dataclass
class SampleRun:
    """Knobs of the fake run, and (after generation) the values it logged."""

    rollouts: int = 4
    steps_per_rollout: int = 2
    num_rollout: int = 30
    rollout_gpus: int = 8
    train_ranks: int = 8
    noise_per_rollout: int = 40
    nan_at_step: int | None = None
    eval_every: int = 0
    log_passrate: bool = True
    multi_turn: bool = False
    save_every: int = 0  # rollouts between checkpoint saves (0 = never)
    remote_ip: str | None = None  # put train actors on another node (Ray adds ", ip=...")
    shim_scaling: float | None = 5.0  # None: the shim never logs its fields line
    shim_failure: str | None = None  # e.g. "ImportError: megatron.bridge"
    rollout_seconds: float = 60.0
    expected: dict[str, dict[int, float]] = field(default_factory=dict)

    def record(self, key: str, step: int, value: float) -> None:
        self.expected.setdefault(key, {})[step] = value


def _ts(seconds: float) -> str:
    stamp = BASE + timedelta(seconds=seconds)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.") + f"{stamp.microsecond // 1000:03d}"


def _prefix(actor: str, pid: int, ip: str | None = None) -> str:
    where = f", ip={ip}" if ip else ""
    return f"{DIM}{CYAN}({actor} pid={pid}{where}){RESET} "


def _repr(value: float) -> str:
    return (
        repr(float(value))
        if math.isfinite(value)
        else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    )


def _dict(items: list[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"'{k}': {v}" for k, v in items) + "}"


@dataclass(frozen=True)
class _Actors:
    """The Ray prefixes of the run's actors: the rollout manager, the train ranks, an SGLang engine."""

    rm: str
    train: list[str]
    sgl: str


def generate(run: SampleRun) -> Iterator[str]:
    """Yield the log's lines (each without its trailing newline)."""
    train = [_prefix("MegatronTrainRayActor", 52001 + r, run.remote_ip) for r in range(run.train_ranks)]
    who = _Actors(_prefix("RolloutManager", 51234), train, _prefix("SGLangEngine", 51300))
    yield from _preamble(run, who)
    for i in range(run.rollouts):
        yield from _rollout(run, who, i)


def _preamble(run: SampleRun, who: _Actors) -> Iterator[str]:
    """The placement group, Megatron's argument dump, and the shim's lines."""
    train = who.train
    yield f"[{_ts(0)} main] placement_group.py:113 - Creating placement group with {run.rollout_gpus} GPUs..."
    yield f"[{_ts(0.5)} main] base.py:172 - Initialising tracking backend: dump_details"
    yield f"{train[0]}------------------------ arguments ------------------------"
    for name, value in (
        ("num_rollout", run.num_rollout),
        ("rollout_num_gpus", run.rollout_gpus),
        ("rollout_batch_size", 32),
        ("n_samples_per_prompt", 8),
        ("global_batch_size", 128),
    ):
        yield f"{train[0]}  {name} {'.' * (48 - len(name))} {value}"
    if run.shim_failure:
        yield (
            f"{train[0]}[{_ts(1)} actor_cell0_rank0] __init__.py:41 - "
            f"miles nemotron_h plugin failed to load: {run.shim_failure}"
        )
    if run.shim_scaling is not None:
        for r in range(run.train_ranks):
            yield (
                f"{train[r]}ultra-console shim: applied NemotronH provider fields "
                f'{{"moe_router_topk_scaling_factor": {run.shim_scaling}, "moe_router_num_groups": 1, '
                f'"moe_router_group_topk": 1, "moe_latent_size": 2048}}'
            )


def _rollout(run: SampleRun, who: _Actors, i: int) -> Iterator[str]:
    """One rollout: generation and its noise, the rollout dict, the train steps, both perf lines, then
    multi-turn, eval and save lines where the run has them."""
    t0 = 10 + i * run.rollout_seconds
    train = who.train
    yield from _generation(run, who, t0)
    perf_line = f"{who.rm}[{_ts(t0 + 40)} rollout_manager] metrics.py:89 - perf {i}: {_perf_dict(run, i)}"
    yield f"{train[0]}[{_ts(t0 + 41)} actor_cell0_rank0] timer.py:30 - Timer train start"
    yield (
        f"{train[0]}[{_ts(t0 + 42)} actor_cell0_rank0] "
        f"log_utils.py:123 - rollout {i}: {_rollout_dict(run, i)}"
    )
    for s in range(run.steps_per_rollout):
        yield from _train_step(run, train[0], i * run.steps_per_rollout + s, _ts(t0 + 45 + 5 * s))
    # The RolloutManager's perf line reaches the driver after
    # the trainer's lines (later arrival, earlier stamp).
    yield perf_line
    yield f"{train[0]}[{_ts(t0 + 55)} actor_cell0_rank0] timer.py:42 - Timer train end (elapsed: 12.7s)"
    yield (
        f"{train[0]}[{_ts(t0 + 56)} actor_cell0_rank0] "
        f"train_metric_utils.py:56 - perf {i}: {_dict(_train_perf_items(run))}"
    )
    yield from _extras(run, who, i, t0, (i + 1) * run.steps_per_rollout)


def _generation(run: SampleRun, who: _Actors, t0: float) -> Iterator[str]:
    """The tqdm bar of rollout generation, SGLang's decode noise and the trainers' phase lines."""
    bar = "\r".join(
        f"Rollout generation: {p:3d}%|{'#' * (p // 10):<10}| {p * 256 // 100}/256" for p in (0, 30, 70, 100)
    )
    yield f"{who.rm}{bar}"
    for k in range(run.noise_per_rollout):
        yield (
            f"{who.sgl}[{_ts(t0 + k * 0.2)[:19]} DP{k % 2} TP0 EP{k % 8}] Decode batch. #running-req: "
            f"{64 - k % 7}, #token: {10240 + 17 * k}, token usage: 0.{12 + k % 50:02d}, "
            f"gen throughput (token/s): {2300 + k}.55, #queue-req: 0,"
        )
        if k % 10 == 0:
            yield f"{who.train[0]}ft cls=MegatronTrainRayActor fn=train phase=start"
            yield (
                f"{who.train[1]}ft cls=MegatronTrainRayActor fn=train phase=start{GREEN} "
                f"[repeated {run.train_ranks - 2}x across cluster]{RESET}"
            )


def _perf_dict(run: SampleRun, i: int) -> str:
    """The RolloutManager's `perf i` dict (pass@k where the run logs it); records what it logged."""
    tpgs, trunc = 13.5 + i, 0.1 + 0.01 * i
    perf_items = [
        ("rollout/response_len/mean", _repr(214.6 + i)),
        ("rollout/response_len/median", "240.0"),
        ("rollout/response_len/max", "256"),
        ("rollout/response_len/min", "37"),
        ("rollout/zero_std/count_0.0", "5"),
        ("rollout/zero_std/count_1.0", "3"),
        ("rollout/zero_std/all_zero_percentage", "0.15625"),
        ("rollout/zero_std/all_one_percentage", "0.09375"),
        ("rollout/prefix_cache_hit_rate", "0.41"),
        ("rollout/truncated_ratio", _repr(trunc)),
        ("perf/rollout_time", _repr(31.8 + i)),
        ("perf/tokens_per_gpu_per_sec", _repr(tpgs)),
        ("perf/longest_sample_tokens_per_sec", "8.05"),
        ("perf/effective_tokens_per_gpu_per_sec", _repr(tpgs)),
    ]
    if run.log_passrate:
        perf_items += [
            ("passrate/pass@1", f"np.float64({0.25 + 0.01 * i})"),
            ("passrate/pass@8", "np.float64(0.5)"),
        ]
    run.record("perf/tokens_per_gpu_per_sec", i, tpgs)
    run.record("rollout/truncated_ratio", i, trunc)
    return _dict(perf_items)


def _rollout_dict(run: SampleRun, i: int) -> str:
    """The trainer's `rollout i` dict; records its reward."""
    trunc, reward = 0.1 + 0.01 * i, 0.125 + 0.05 * i
    run.record("rollout/raw_reward", i, reward)
    return _dict(
        [
            ("rollout/response_lengths", _repr(214.6 + i)),
            ("rollout/rewards", "0.0"),
            ("rollout/truncated", _repr(trunc)),
            ("rollout/raw_reward", _repr(reward)),
            ("rollout/log_probs", "-0.398"),
        ]
    )


def _train_step(run: SampleRun, train0: str, step: int, ts: str) -> Iterator[str]:
    """One train step, logged twice as miles does (log_utils.py and model.py, a millisecond apart)."""
    nan = step == run.nan_at_step
    loss = math.nan if nan else -0.0003 * (step + 1)
    kl = 0.001 * (step % 3)
    items = [
        ("train/loss", _repr(loss)),
        ("train/pg_loss", _repr(loss)),
        ("train/entropy_loss", "0.0"),
        ("train/pg_clipfrac", "0.0"),
        ("train/ppo_kl", _repr(kl)),
        ("train/ess_ratio", "1.0"),
        ("train/train_rollout_logprob_abs_diff", _repr(0.0107)),
        ("train/train_rollout_kl", "0.00019"),
        ("train/grad_norm", _repr(math.nan if nan else 0.0871)),
        ("train/lr-pg_0", "1e-06"),
        ("train/step", str(step)),
    ]
    run.record("train/loss", step, loss)
    run.record("train/ppo_kl", step, kl)
    yield f"{train0}[{ts} actor_cell0_rank0] log_utils.py:542 - step {step}: {_dict(items)}"
    later = f"{ts[:-3]}{int(ts[-3:]) + 1:03d}"
    yield f"{train0}[{later} actor_cell0_rank0] model.py:854 - step {step}: {_dict(items)}"


def _train_perf_items(run: SampleRun) -> list[tuple[str, str]]:
    """The trainer's `perf i` dict."""
    return [
        ("perf/sleep_time", "4.1"),
        ("perf/update_weights_time", "9.7"),
        ("perf/train_wait_time", "44.9"),
        ("perf/train_time", "12.7"),
        ("perf/actor_train_tflops", "27.2"),
        ("perf/mfu_peak_tflops", "989.0"),
        ("perf/actor_train_mfu", "0.0275"),
        ("perf/step_time", _repr(run.rollout_seconds)),
        ("perf/wait_time_ratio", "0.78"),
    ]


def _extras(run: SampleRun, who: _Actors, i: int, t0: float, step: int) -> Iterator[str]:
    """The multi-turn dict, the eval line and the checkpoint save, each where the run has them."""
    train0 = who.train[0]
    if run.multi_turn:
        mt = [
            ("multi_turn/multi_turn_metric/round_number_mean", "np.float64(2.0)"),
            ("multi_turn/multi_turn_metric/round_number_max", "np.int64(3)"),
            ("multi_turn/multi_turn_metric/round_number_min", "np.int64(1)"),
        ]
        yield f"{train0}[{_ts(t0 + 42.5)} actor_cell0_rank0] log_utils.py:123 - multi_turn {i}: {_dict(mt)}"
    if run.eval_every and i % run.eval_every == 0:
        ev = [
            ("eval/aime-none_reward_ratio", "0.0"),
            ("eval/aime", _repr(0.1333 + 0.01 * i)),
            ("eval/aime-truncated_ratio", "0.21"),
            ("eval/aime-pass@16", "np.float64(0.4)"),
        ]
        run.record("eval/aime", i, 0.1333 + 0.01 * i)
        yield f"{who.rm}[{_ts(t0 + 58)} rollout_manager] metrics.py:53 - eval {i}: {_dict(ev)}"
    if run.save_every and (i + 1) % run.save_every == 0:
        yield f"{train0}[{_ts(t0 + 57)} actor_cell0_rank0] timer.py:30 - Timer save_model start"
        saved = f"iteration {step:7d} to /root/shared_data/r/checkpoints"
        yield f"{train0}  successfully saved checkpoint from {saved}"
        yield f"{train0}[{_ts(t0 + 59)} actor_cell0_rank0] timer.py:42 - Timer save_model end (elapsed: 2.0s)"


def write(path: str | Path, run: SampleRun | None = None) -> SampleRun:
    """Write the fake log to `path`; returns the run (with `expected` filled in)."""
    run = run or SampleRun()
    with open(path, "w", encoding="utf-8") as fh:
        for line in generate(run):
            fh.write(line + "\n")
    return run


if (
    __name__ == "__main__"
):  # a fake miles driver for a real Ray job: print the log, then exit like miles would
    import argparse
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("--rollouts", type=int, default=3)
    ap.add_argument("--nan-at-step", type=int, default=None)
    ap.add_argument("--fail", action="store_true", help="end with a traceback and exit status 1")
    ns = ap.parse_args()
    for out_line in generate(
        SampleRun(rollouts=ns.rollouts, nan_at_step=ns.nan_at_step, noise_per_rollout=5)
    ):
        print(out_line, flush=True)
    if ns.fail:
        print("Traceback (most recent call last):\nRuntimeError: loss is nan, giving up", flush=True)
        sys.exit(1)
