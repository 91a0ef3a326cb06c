"""The simulated rollout's samples, saved as miles' `save_debug_rollout_data` does with `--dump-details`:
`{dump_details}/rollout_data/<N>.pt` (backend.demo.rollout_dump), in place, before the `perf N` line.

Why: the console's Samples screen and its learning-health rules read that file on a live run; the simulator
gives them one on a loopback cluster. The samples agree with the perf line: the same response lengths in the
same groups (metrics.rollout_lengths), truncated ones (at the length limit) have no `</think>` and score 0 as
deepscaler does, rewards are Python ints, and a group has spread unless all its lengths are equal (the perf
line counts those as its zero-std groups), so the log's zero-std numbers and the samples' say the same. Token
ids are zeros (their count is what a reader takes), log-probs are left unset: the file stays small.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.demo.rollout_dump import sample_record, write_rollout
from backend.demo.simtrainer import metrics

PROMPT = "<|im_start|>user\nSimulated problem {g}: what is {a} + {b}?<|im_end|>\n<|im_start|>assistant\n"
PROMPT_TOKENS = 24


def _rewards(rollout_id: int, group: int, lens: list[int], max_len: int) -> list[int]:
    """deepscaler-like 0/1 rewards: 0 when truncated, else a draw at the run's reward level; spread forced
    unless every length is equal (then all 0: the perf line's zero-std group)."""
    if len(set(lens)) == 1:
        return [0] * len(lens)
    r = metrics._rng("sample-reward", rollout_id, group)
    p = metrics.reward_at(rollout_id)
    rewards = [0 if n >= max_len else int(r.random() < p) for n in lens]
    open_rows = [i for i, n in enumerate(lens) if n < max_len]
    if len(set(rewards)) == 1 and open_rows:
        rewards[open_rows[0]] = 1 - rewards[open_rows[0]]
    return rewards


def rollout_samples(rollout_id: int, rbs: int, n: int, max_len: int, version: str) -> list[dict[str, Any]]:
    """Every sample of rollout `rollout_id` as `Sample.to_dict()` writes it, group-major."""
    lens = metrics.rollout_lengths(rollout_id, rbs, n, max_len)
    out: list[dict[str, Any]] = []
    for g in range(rbs):
        group = rollout_id * rbs + g  # a global counter, as miles' data source keeps it
        glens = lens[g * n : (g + 1) * n]
        a, b = 3 + group % 17, 5 + group % 11
        for i, (length, reward) in enumerate(
            zip(glens, _rewards(rollout_id, g, glens, max_len), strict=True)
        ):
            if length >= max_len:
                response, status = "Let me work through this step by step, carefully. " * 4, "truncated"
            else:
                answer = a + b if reward else a + b + 1 + i
                response, status = (
                    f"{a} plus {b}, checking twice. </think>\nThe answer is \\boxed{{{answer}}}.",
                    "completed",
                )
            out.append(
                sample_record(
                    group,
                    group * n + i,
                    prompt=PROMPT.format(g=group, a=a, b=b),
                    label=str(a + b),
                    tokens=[0] * (PROMPT_TOKENS + length),
                    response=response,
                    response_length=length,
                    reward=reward,
                    status=status,
                    weight_versions=[version],
                    prefix_cache_info={"cached_tokens": 0, "total_prompt_tokens": PROMPT_TOKENS},
                )
            )
    return out


def save_rollout(dump_details: str, rollout_id: int, rbs: int, n: int, max_len: int) -> Path:
    """Write `rollout_data/<N>.pt` (colocated: rollout N is generated on weight version N+1)."""
    samples = rollout_samples(rollout_id, rbs, n, max_len, str(rollout_id + 1))
    return write_rollout(dump_details, rollout_id, samples)
