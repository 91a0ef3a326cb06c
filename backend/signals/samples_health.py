"""Learning health from a rollout's own samples: metric records the rules of configs/alerts.toml judge.

Why: the zero-std fraction miles' `perf N` line gives is wrong for integer rewards (its all-zero / all-one
percentages stay 0.0: it looks the counts up under "0.0" / "1.0" while the keys read `count_0`, `count_1`), so
once a rollout's file is read its groups' own numbers replace the log's `derived/zero_std_frac` (the record's
source "samples" outranks the log, the events and the dashboard), and the gap between them, in groups, is a
series of its own (`samples/zero_std_log_gap`) that an alert names. The file is written before `perf N` is
logged, so the gap is computed in whichever order the two arrive. Besides: truncation, degenerate groups
(identical or empty responses), mixed weight versions, and response length growing while the reward is flat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from backend.signals.grpo_groups import RolloutGroups
from backend.signals.metrics import MetricRecord

SOURCE = "samples"
KIND = "samples"
LENGTH_WINDOW = 5  # rollouts over which "length grows while the reward is flat" is judged
FLAT_REWARD = 0.02  # a reward mean that moved less than this over the window is flat
ZERO_PCT_KEYS = ("rollout/zero_std/all_zero_percentage", "rollout/zero_std/all_one_percentage")


def log_zero_std_frac(values: dict[str, float]) -> float | None:
    """What miles' perf line says the zero-std fraction is, by its two percentages (None: not logged)."""
    pcts = [values[k] for k in ZERO_PCT_KEYS if k in values and math.isfinite(values[k])]
    return sum(pcts) if pcts else None


@dataclass
class SamplesHealth:
    """Per-rollout numbers from the samples, and the log's zero-std percentages, matched by rollout."""

    ENRICHED_KINDS: ClassVar[frozenset[str]] = frozenset({"perf-rollout"})  # the only records enrich reads

    ours: dict[int, RolloutGroups] = field(default_factory=dict)
    logged: dict[int, float] = field(default_factory=dict)  # rollout -> the log's all-0 + all-1 fraction
    history: list[tuple[int, float, float]] = field(
        default_factory=list
    )  # (rollout, reward mean, length mean)

    def record(self, groups: RolloutGroups, ts: float) -> MetricRecord:
        """The metric record of one train rollout's samples (at its rollout step)."""
        self.ours[groups.rollout] = groups
        values = {
            "derived/zero_std_frac": groups.zero_std_frac,
            "samples/zero_std_frac": groups.zero_std_frac,
            "samples/zero_std_groups": float(groups.zero_std),
            "samples/truncated_frac": groups.truncated_frac,
            "samples/degenerate_frac": groups.degenerate / len(groups.groups) if groups.groups else 0.0,
            "samples/weight_versions": float(len(groups.versions)),
            "samples/response_len_mean": groups.len_mean,
        }
        if groups.reward_mean is not None:
            values["samples/reward_mean"] = groups.reward_mean
            self.history = [h for h in self.history if h[0] != groups.rollout]
            self.history.append((groups.rollout, groups.reward_mean, groups.len_mean))
            self.history.sort()
        growth = self.length_growth()
        if growth is not None:
            values["samples/len_growth_flat_reward"] = growth
        gap = self.gap(groups.rollout)
        if gap is not None:
            values["samples/zero_std_log_gap"] = gap
        return MetricRecord(KIND, groups.rollout, ts, "rollout_data", values, SOURCE)

    def enrich(self, rec: MetricRecord) -> None:
        """A rollout perf dict: remember the log's zero-std fraction; once this rollout's samples are known,
        theirs is the chart's value and the gap is added."""
        if rec.kind not in self.ENRICHED_KINDS:
            return
        said = log_zero_std_frac(rec.values)
        if said is None:
            return
        self.logged[rec.n] = said
        groups = self.ours.get(rec.n)
        if groups is not None:
            rec.values["derived/zero_std_frac"] = groups.zero_std_frac
            gap = self.gap(rec.n)
            if gap is not None:
                rec.values["samples/zero_std_log_gap"] = gap

    def gap(self, rollout: int) -> float | None:
        """How many groups the log's zero-std percentages miss (or add) against the samples' own count."""
        groups, said = self.ours.get(rollout), self.logged.get(rollout)
        if groups is None or said is None or not groups.groups:
            return None
        return abs(said * len(groups.groups) - groups.zero_std)

    def length_growth(self) -> float | None:
        """Relative growth of the mean response length over the last LENGTH_WINDOW rollouts when the reward
        mean stayed flat over them (0.0 when it moved); None until there are that many."""
        if len(self.history) < LENGTH_WINDOW:
            return None
        window = self.history[-LENGTH_WINDOW:]
        rewards = [r for _, r, _ in window]
        first_len, last_len = window[0][2], window[-1][2]
        if max(rewards) - min(rewards) >= FLAT_REWARD or first_len <= 0:
            return 0.0
        return max(0.0, last_len / first_len - 1.0)
