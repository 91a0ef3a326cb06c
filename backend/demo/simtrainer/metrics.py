"""miles' metric dicts (miles-run-output.md §3), with plausible deterministic values.

Key order, types and reprs follow miles: Python floats, ints where miles has ints, bare
`nan` when training diverges, and `np.float64(...)` for pass@k (numpy's repr, reproduced
without importing numpy).
"""

from __future__ import annotations

import math
import random
import zlib


class NpFloat64(float):
    """Prints like numpy 2's float64 inside a dict: `np.float64(0.4375)`."""

    def __repr__(self) -> str:
        return f"np.float64({float.__repr__(self)})"


def _rng(*key: object) -> random.Random:
    return random.Random(zlib.crc32(repr(key).encode()))  # stable across processes


def reward_at(rollout_id: int) -> float:
    """A slowly improving task reward (what `rollout/raw_reward` tracks)."""
    return 0.1 + 0.6 * (1.0 - math.exp(-rollout_id / 20.0))


def response_lengths(r: random.Random, rbs: int, n: int, max_len: int) -> list[int]:
    """The rollout's response lengths (sorted; group g is the g-th run of n): the perf line's and the
    rollout file's (backend.demo.simtrainer.samples), so the two agree as miles' do."""
    lens = [r.randint(max(1, max_len // 8), max_len) for _ in range(rbs * n)]
    lens.sort()
    return lens


def rollout_lengths(rollout_id: int, rbs: int, n: int, max_len: int) -> list[int]:
    """`response_lengths` of rollout `rollout_id`, drawn as rollout_perf draws them."""
    return response_lengths(_rng("perf-rollout", rollout_id), rbs, n, max_len)


def rollout_perf(
    rollout_id: int, n_gpus: int, rbs: int, n: int, max_len: int, rollout_time: float, passrate: bool
) -> dict[str, object]:
    """RolloutManager `perf N` (metrics.py:89)."""
    r = _rng("perf-rollout", rollout_id)
    lens = response_lengths(r, rbs, n, max_len)
    mean = sum(lens) / len(lens)
    median = float(lens[len(lens) // 2])
    truncated = sum(1 for x in lens if x >= max_len) / len(lens)
    groups = [lens[i : i + n] for i in range(0, len(lens), n)]
    zero_std = sum(1 for g in groups if len(set(g)) == 1)
    tokens = sum(lens)
    out: dict[str, object] = {
        "rollout/response_len/mean": mean,
        "rollout/response_len/median": median,
        "rollout/response_len/max": max(lens),
        "rollout/response_len/min": min(lens),
        "rollout/zero_std/count_0.0": zero_std,
        "rollout/zero_std/all_zero_percentage": zero_std / max(1, len(groups)),
        "rollout/zero_std/all_one_percentage": 0.0,
        "rollout/prefix_cache_hit_rate": round(r.uniform(0.3, 0.6), 4),
        "rollout/avg_cached_tokens_per_sample": float(r.randint(32, 128)),
        "rollout/repetition_frac": 0.0,
        "rollout/truncated_ratio": truncated,
        "perf/rollout_time": rollout_time,
        "perf/tokens_per_gpu_per_sec": tokens / rollout_time / max(1, n_gpus),
        "perf/longest_sample_tokens_per_sec": max(lens) / rollout_time,
        "perf/effective_tokens_per_gpu_per_sec": tokens / rollout_time / max(1, n_gpus),
        "perf/longest_effective_sample_tokens_per_sec": max(lens) / rollout_time,
    }
    if passrate:
        p = reward_at(rollout_id)
        k = 1
        while k <= n:
            out[f"passrate/pass@{k}"] = NpFloat64(round(1 - (1 - p) ** k, 4))
            k *= 2
    return out


def eval_metrics(rollout_id: int, name: str, passrate: bool, n: int = 4) -> dict[str, object]:
    """RolloutManager `eval N` (metrics.py:53)."""
    r = _rng("eval", rollout_id)
    score = round(reward_at(rollout_id) * 0.5 + r.uniform(-0.02, 0.02), 4)
    out: dict[str, object] = {
        f"eval/{name}-none_reward_ratio": 0.0,
        f"eval/{name}": score,
        f"eval/{name}/response_len/mean": round(r.uniform(6000, 12000), 1),
        f"eval/{name}/response_len/median": float(r.randint(6000, 12000)),
        f"eval/{name}/response_len/max": 16384,
        f"eval/{name}/response_len/min": r.randint(800, 3000),
        f"eval/{name}/repetition_frac": 0.0,
        f"eval/{name}/truncated_ratio": round(r.uniform(0.1, 0.3), 4),
    }
    out[f"eval/{name}-truncated_ratio"] = out[f"eval/{name}/truncated_ratio"]
    if passrate:
        out[f"eval/{name}-pass@{n}"] = NpFloat64(round(1 - (1 - score) ** n, 4))
    return out


def rollout_batch(rollout_id: int) -> dict[str, float]:
    """Train actor `rollout N` (log_utils.py:123): batch means; raw_reward is the task reward."""
    r = _rng("rollout", rollout_id)
    raw = reward_at(rollout_id) + r.uniform(-0.03, 0.03)
    resp = r.uniform(150, 250)
    return {
        "rollout/response_lengths": resp,
        "rollout/rewards": r.uniform(-1e-3, 1e-3),
        "rollout/truncated": r.uniform(0.0, 0.6),
        "rollout/rollout_log_probs": -r.uniform(0.3, 0.5),
        "rollout/raw_reward": raw,
        "rollout/total_lengths": resp + r.uniform(150, 200),
        "rollout/log_probs": -r.uniform(0.3, 0.5),
        "rollout/advantages": 0.0,
        "rollout/returns": 0.0,
    }


KL_SPIKE = 0.5  # `--sim-kl-spike-at-rollout`: thousands of times the ordinary ppo_kl (|x| <= 1e-4)


def train_step(
    step: int, first_of_rollout: bool, lr: float, nan: bool, kl_spike: bool = False, nan_grad: bool = False
) -> dict[str, object]:
    """Train actor `step N` (log_utils.py:542 and model.py:854; printed twice). `nan`: loss and grad norm
    NaN (diverged); `nan_grad`: the grad norm alone (a step skipped); `kl_spike`: ppo_kl at KL_SPIKE."""
    r = _rng("step", step)
    loss = float("nan") if nan else -r.uniform(0, 5e-4)
    return {
        "train/loss": loss,
        "train/pg_loss": loss,
        "train/entropy_loss": 0.0,
        "train/pg_clipfrac": 0.0 if first_of_rollout else r.uniform(0, 0.01),
        "train/ppo_kl": KL_SPIKE if kl_spike else 0.0 if first_of_rollout else r.uniform(-1e-4, 1e-4),
        "train/ess_ratio": 1.0,
        "train/train_rollout_logprob_abs_diff": r.uniform(0.005, 0.02),
        "train/train_rollout_kl": r.uniform(1e-4, 5e-4),
        "train/grad_norm": float("nan") if nan or nan_grad else r.uniform(0.05, 0.15),
        "train/lr-pg_0": lr,
        "train/lr-pg_1": lr,
        "train/step": step,
    }


def train_perf(rollout_id: int, step_seconds: float, steps: int) -> dict[str, float]:
    """Train actor `perf N` (train_metric_utils.py:56)."""
    r = _rng("perf-train", rollout_id)
    train_time = step_seconds * steps
    wait = step_seconds * (1.0 + r.uniform(0, 0.3))
    tflops = r.uniform(25, 35)
    return {
        "perf/sleep_time": r.uniform(0.05, 0.2),
        "perf/wake_up_time": r.uniform(0.05, 0.2),
        "perf/data_preprocess_time": r.uniform(0.01, 0.05),
        "perf/train_wait_time": wait,
        "perf/log_probs_time": r.uniform(0.05, 0.2),
        "perf/actor_train_time": train_time,
        "perf/train_time": train_time + 0.1,
        "perf/log_probs_tflops": tflops + 3,
        "perf/actor_train_tflops": tflops,
        "perf/actor_train_tok_per_s": r.uniform(3000, 3600),
        "perf/mfu_peak_tflops": 989.0,
        "perf/actor_train_mfu": tflops / 989.0,
        "perf/step_time": wait + train_time + 0.1,
        "perf/wait_time_ratio": wait / (wait + train_time + 0.1),
    }
