"""The GRPO groups of one rollout, and the learning-health numbers computed from its samples.

Why: a group whose rewards are all equal gives no gradient; the operator needs to see which prompts those
are, what was written, and how often it happens. Groups are rebuilt on `group_index` as miles itself does
(`_reward_group_segments`): a dynamic-sampling filter drops whole groups (their ids are missing: real gaps),
and trimming to a multiple of the global batch size cuts the last group short, so fixed chunks of
n_samples_per_prompt would be wrong. The advantage is miles' GRPO one (`_normalize_rewards_by_rollout`):
(reward - group mean) / (std + 1e-6), std unbiased (n-1), divided only when std > 0, siblings of one
trajectory (same `rollout_id`) counted once. Zero-std is exact equality, as miles' perf metric tests it;
the counts per common reward are computed here from the samples because miles' all-zero / all-one
percentages look their counts up under "0.0" / "1.0" while integer rewards log `count_0` / `count_1`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from backend.signals.rollout_data import RolloutSamples, Sample

STD_EPS = 1e-6  # miles: normalized / (std + 1e-6)
PROMPT_HEAD = 160  # characters of a prompt shown in a table row
TAIL_CHARS = 600  # the chat prompt's end: where the question is (the template's system text comes first)


@dataclass(frozen=True)
class GroupStats:
    """One GRPO group (one prompt, its n responses)."""

    group_index: int
    n: int
    rewards: tuple[float | None, ...]
    mean: float | None
    std: float | None  # unbiased (n-1); 0.0 for a group of one
    zero_std: bool
    truncated: int
    len_min: int
    len_mean: float
    len_max: int
    versions: tuple[str, ...]  # distinct weight versions, in first-seen order
    advantages: tuple[float | None, ...]  # per sample, what it trained on (None: no reward)
    prompt_head: str
    short: bool = False  # fewer samples than the rollout's usual group size (trimmed or filtered)
    degenerate: bool = False  # every response identical, or an empty one among them

    @property
    def common_reward(self) -> float | None:
        return self.rewards[0] if self.zero_std and self.rewards else None


@dataclass(frozen=True)
class RolloutGroups:
    """A rollout's groups in file order, and its totals."""

    name: str
    rollout: int
    evaluation: bool
    groups: tuple[GroupStats, ...]
    samples: int
    group_size: int  # the most common group size (n_samples_per_prompt as the file shows it)
    truncated: int
    zero_std: int
    zero_std_by_reward: tuple[tuple[float, int], ...]  # (common reward, groups), as miles' count_<r>
    missing_ids: int  # gaps in the group ids between the first and the last (filtered-out groups)
    reward_mean: float | None
    len_mean: float
    versions: tuple[str, ...]
    degenerate: int

    @property
    def zero_std_frac(self) -> float:
        return self.zero_std / len(self.groups) if self.groups else 0.0

    @property
    def truncated_frac(self) -> float:
        return self.truncated / self.samples if self.samples else 0.0

    @property
    def mixed_versions(self) -> bool:
        return len(self.versions) > 1

    def count_of(self, reward: float) -> int:
        return sum(n for r, n in self.zero_std_by_reward if r == reward)


def prompt_head(prompt: str, limit: int = PROMPT_HEAD) -> str:
    """One line of a chat-templated prompt: the last user turn's text (the template's markup dropped)."""
    text = prompt[-TAIL_CHARS:] if len(prompt) > TAIL_CHARS else prompt
    for marker in ("<|im_start|>user\n", "<|start_header_id|>user<|end_header_id|>", "user\n", "user: "):
        at = text.rfind(marker)
        if at >= 0:
            text = text[at + len(marker) :]
            break
    for end in ("<|im_end|>", "<|eot_id|>"):
        text = text.split(end, 1)[0]
    return " ".join(text.split())[:limit]


@dataclass(frozen=True)
class Normalization:
    """How miles turned rewards into advantages: `--disable-rewards-normalization` trains on the raw reward,
    `--disable-grpo-std-normalization` subtracts the group mean without dividing by its std."""

    rewards: bool = True
    std: bool = True


MILES_DEFAULT = Normalization()


def advantages(samples: Sequence[Sample], norm: Normalization = MILES_DEFAULT) -> tuple[float | None, ...]:
    """miles' GRPO advantage per sample of one group (siblings sharing a `rollout_id` share one reward)."""
    keys = _siblings(samples)
    shared = [samples[rows[0]].reward for rows in keys.values()]
    if any(r is None for r in shared):
        return (None,) * len(samples)
    if not norm.rewards:
        return tuple(s.reward for s in samples)
    normalized = _normalized([float(r) for r in shared if r is not None], norm)
    out: list[float | None] = [None] * len(samples)
    for rows, value in zip(keys.values(), normalized, strict=True):
        for row in rows:
            out[row] = value
    return tuple(out)


def _siblings(samples: Sequence[Sample]) -> dict[object, list[int]]:
    """The positions of each reward's samples: siblings share a `rollout_key`, any other sample is alone."""
    keys: dict[object, list[int]] = {}
    for position, sample in enumerate(samples):
        key = sample.rollout_key if sample.rollout_key is not None else ("i", sample.index, position)
        keys.setdefault(key, []).append(position)
    return keys


def _normalized(rewards: list[float], norm: Normalization) -> list[float]:
    """The group's rewards less their mean, over their std (plus miles' epsilon) unless disabled or zero."""
    mean = math.fsum(rewards) / len(rewards)
    normalized = [r - mean for r in rewards]
    if norm.std and len(rewards) > 1:
        std = statistics.stdev(rewards)
        if std > 0:
            normalized = [x / (std + STD_EPS) for x in normalized]
    return normalized


def _degenerate(samples: Sequence[Sample]) -> bool:
    """Degenerate sampling: an empty response, or every response of a group of two or more the same."""
    if any(not s.response.strip() for s in samples):
        return True
    return len(samples) > 1 and len({s.response for s in samples}) == 1


def group_stats(
    group_index: int, samples: Sequence[Sample], prompt: str, usual: int, norm: Normalization = MILES_DEFAULT
) -> GroupStats:
    """The numbers of one group, as miles computes them."""
    rewards = tuple(s.reward for s in samples)
    known = [r for r in rewards if r is not None]
    lengths = [s.response_length for s in samples]
    versions = tuple(dict.fromkeys(v for s in samples for v in s.weight_versions))
    return GroupStats(
        group_index=group_index,
        n=len(samples),
        rewards=rewards,
        mean=_mean(known),
        std=_std(known),
        zero_std=_zero_std(rewards, known),
        truncated=sum(1 for s in samples if s.truncated),
        len_min=min(lengths),
        len_mean=sum(lengths) / len(lengths),
        len_max=max(lengths),
        versions=versions,
        advantages=advantages(samples, norm),
        prompt_head=prompt_head(prompt),
        short=len(samples) < usual,
        degenerate=_degenerate(samples),
    )


def _mean(known: Sequence[float]) -> float | None:
    return math.fsum(known) / len(known) if known else None


def _std(known: Sequence[float]) -> float | None:
    """The sample std (miles' torch.std); 0.0 for one reward, None for none."""
    return statistics.stdev(known) if len(known) > 1 else (0.0 if known else None)


def _zero_std(rewards: Sequence[float | None], known: Sequence[float]) -> bool:
    """Every reward of the group known and the same: no advantage to train on."""
    return bool(known) and len(known) == len(rewards) and all(r == known[0] for r in known)


def grouped(rollout: RolloutSamples) -> dict[int, list[Sample]]:
    """Samples by `group_index`, groups in the order their first sample appears."""
    by_group: dict[int, list[Sample]] = {}
    for sample in rollout.samples:
        by_group.setdefault(sample.group_index, []).append(sample)
    return by_group


def rollout_groups(rollout: RolloutSamples, norm: Normalization = MILES_DEFAULT) -> RolloutGroups:
    """Every group of a rollout and the rollout's totals."""
    by_group = grouped(rollout)
    usual = _usual_size([len(g) for g in by_group.values()])
    groups = tuple(group_stats(g, s, rollout.prompts.get(g, ""), usual, norm) for g, s in by_group.items())
    lengths = [s.response_length for s in rollout.samples]
    truncated, zero_std, degenerate = _group_counts(groups)
    return RolloutGroups(
        name=rollout.name,
        rollout=rollout.rollout,
        evaluation=rollout.evaluation,
        groups=groups,
        samples=len(rollout.samples),
        group_size=usual,
        truncated=truncated,
        zero_std=zero_std,
        zero_std_by_reward=_zero_std_by_reward(groups),
        missing_ids=_missing_ids(sorted(by_group)),
        reward_mean=_mean([s.reward for s in rollout.samples if s.reward is not None]),
        len_mean=sum(lengths) / len(lengths) if lengths else 0.0,
        versions=tuple(dict.fromkeys(v for g in groups for v in g.versions)),
        degenerate=degenerate,
    )


def _group_counts(groups: Sequence[GroupStats]) -> tuple[int, int, int]:
    """(truncated samples, zero-std groups, degenerate groups) over a rollout's groups."""
    return (
        sum(g.truncated for g in groups),
        sum(1 for g in groups if g.zero_std),
        sum(1 for g in groups if g.degenerate),
    )


def _usual_size(sizes: list[int]) -> int:
    """The most common group size (the larger on a tie); 0 for no group."""
    return max(set(sizes), key=lambda n: (sizes.count(n), n)) if sizes else 0


def _zero_std_by_reward(groups: Sequence[GroupStats]) -> tuple[tuple[float, int], ...]:
    """How many zero-std groups share each reward (one decimal), by reward."""
    counts: dict[float, int] = {}
    for group in groups:
        common = group.common_reward
        if common is not None:
            counts[round(common, 1)] = counts.get(round(common, 1), 0) + 1
    return tuple(sorted(counts.items()))


def _missing_ids(ids: list[int]) -> int:
    """Group ids absent between the smallest and the largest (sorted ids)."""
    return (ids[-1] - ids[0] + 1 - len(ids)) if ids else 0


def think_split(response: str) -> tuple[str, str] | None:
    """(reasoning, answer) around the first `</think>`, or None when the response has none (deepscaler then
    scores 0: a cut-off response never reached its answer)."""
    at = response.find("</think>")
    if at < 0:
        return None
    return response[:at], response[at + len("</think>") :]


def _num(value: float | None, digits: int = 6) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def reward_label(reward: float) -> str:
    """A reward as miles' `count_<r>` key prints it for integer rewards ("0", "1"), else one decimal."""
    return str(int(reward)) if reward == int(reward) else f"{reward:.1f}"


def group_json(group: GroupStats) -> dict[str, object]:
    return {
        "group": group.group_index,
        "n": group.n,
        "rewards": [_num(r) for r in group.rewards],
        "mean": _num(group.mean),
        "std": _num(group.std),
        "zero_std": group.zero_std,
        "truncated": group.truncated,
        "response_length": {"min": group.len_min, "mean": _num(group.len_mean, 1), "max": group.len_max},
        "weight_versions": list(group.versions),
        "advantages": [_num(a) for a in group.advantages],
        "short": group.short,
        "degenerate": group.degenerate,
        "prompt_head": group.prompt_head,
    }


def rollout_json(groups: RolloutGroups) -> dict[str, object]:
    """The `samples --json` object of one rollout (sorted keys are the caller's)."""
    return {
        "name": groups.name,
        "rollout": groups.rollout,
        "evaluation": groups.evaluation,
        "samples": groups.samples,
        "group_size": groups.group_size,
        "groups": [group_json(g) for g in groups.groups],
        "zero_std_groups": groups.zero_std,
        "zero_std_frac": _num(groups.zero_std_frac),
        "zero_std_by_reward": {reward_label(r): n for r, n in groups.zero_std_by_reward},
        "truncated": groups.truncated,
        "truncated_frac": _num(groups.truncated_frac),
        "missing_group_ids": groups.missing_ids,
        "reward_mean": _num(groups.reward_mean),
        "response_length_mean": _num(groups.len_mean, 1),
        "weight_versions": list(groups.versions),
        "degenerate_groups": groups.degenerate,
    }


def sample_json(sample: Sample, advantage: float | None) -> dict[str, object]:
    return {
        "index": sample.index,
        "group": sample.group_index,
        "status": sample.status,
        "reward": _num(sample.reward),
        "advantage": _num(advantage),
        "response_length": sample.response_length,
        "prompt_length": sample.prompt_length,
        "effective_length": sample.effective_length,
        "weight_versions": list(sample.weight_versions),
        "label": sample.label,
        "removed": sample.removed,
        "response": sample.response,
    }


def reward_digits(rewards: Sequence[float | None], limit: int = 32) -> str:
    """A group's rewards in one short cell: digits for 0/1 rewards ("1101"), `·` for none, else one
    decimal each, space-separated; cut with `…` past `limit` characters."""
    if all(r is None or r in (0.0, 1.0) for r in rewards):
        text = "".join("·" if r is None else str(int(r)) for r in rewards)
    else:
        text = " ".join("·" if r is None else f"{r:.1f}" for r in rewards)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def group_row(group: GroupStats) -> tuple[str, ...]:
    """One table row (the CLI's and the screen's): group, n (`*`: short), rewards, mean, std, flags (`zero`:
    zero-std, `same`: identical or empty responses), truncated, length min/mean/max, weight versions, prompt
    head."""
    mean = "—" if group.mean is None else f"{group.mean:.2f}"
    std = "—" if group.std is None else f"{group.std:.2f}"
    return (
        str(group.group_index),
        f"{group.n}{'*' if group.short else ''}",
        reward_digits(group.rewards),
        mean,
        std,
        " ".join(flag for flag, on in (("zero", group.zero_std), ("same", group.degenerate)) if on),
        str(group.truncated or ""),
        f"{group.len_min}/{group.len_mean:.0f}/{group.len_max}",
        ",".join(group.versions)[:12],
        group.prompt_head,
    )


GROUP_COLUMNS = (
    "group",
    "n",
    "rewards",
    "mean",
    "std",
    "flags",
    "trunc",
    "len min/mean/max",
    "ver",
    "prompt",
)


def rollout_line(groups: RolloutGroups) -> str:
    """One line about a rollout: samples, groups, zero-std (all-0 / all-1), truncated, reward, length."""
    kind = "eval " if groups.evaluation else ""
    zero = f"zero-std {groups.zero_std}/{len(groups.groups)}"
    by = ", ".join(f"all-{reward_label(r)} {n}" for r, n in groups.zero_std_by_reward)
    reward = "—" if groups.reward_mean is None else f"{groups.reward_mean:.3f}"
    gaps = f", {groups.missing_ids} group ids missing (filtered)" if groups.missing_ids else ""
    mixed = f", weight versions {','.join(groups.versions)}" if groups.mixed_versions else ""
    return (
        f"{kind}rollout {groups.rollout}: {groups.samples} samples in {len(groups.groups)} groups of "
        f"{groups.group_size}; {zero}{f' ({by})' if by else ''}; truncated {groups.truncated} "
        f"({groups.truncated_frac:.0%}); reward mean {reward}; response length mean {groups.len_mean:.0f}"
        f"{gaps}{mixed}"
    )
