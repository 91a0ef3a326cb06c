"""What a run's metrics say about the run as a whole (throughput, time per rollout, progress and ETA,
checkpoints), as typed values the views read by attribute; `to_json()` is the `derived` block `metrics --json`
prints, key for key as before."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Throughput:
    tokens_per_gpu_per_sec: float
    rollout_gpus: int | None
    cluster_tokens_per_sec: float | None
    effective_tokens_per_gpu_per_sec: float | None


@dataclass(frozen=True, slots=True)
class TimePerRollout:
    rollout_s: float | None
    train_s: float | None
    step_s: float | None
    wait_time_ratio: float | None
    rollout_over_train: float | None


@dataclass(frozen=True, slots=True)
class Progress:
    rollouts_done: int
    num_rollout: int | None
    fraction: float | None
    train_steps_done: int
    steps_per_rollout: int | None
    median_rollout_s: float | None
    eta_s: float | None


@dataclass(frozen=True, slots=True)
class CheckpointState:
    count: int
    last_iteration: int | None
    since_s: float | None
    save_interval: int | None = None  # said only before the first checkpoint (when is the first one due)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "count": self.count,
            "last_iteration": self.last_iteration,
            "since_s": self.since_s,
        }
        if self.count == 0:
            out["save_interval"] = self.save_interval
        return out


NO_CHECKPOINT = CheckpointState(0, None, None)


@dataclass(frozen=True, slots=True)
class RunSignals:
    """The derived-signals block of one snapshot (built fresh for it, shared with nobody)."""

    checkpoint: CheckpointState = NO_CHECKPOINT
    throughput: Throughput | None = None
    time_per_rollout: TimePerRollout | None = None
    progress: Progress | None = None
    zero_std_frac: float | None = None
    since_last_metric_s: float | None = None
    has_last_metric: bool = False
    telemetry: Mapping[str, Any] = field(
        default_factory=dict
    )  # dashboard streams' summary (gpus, phases, ...)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.throughput is not None:
            out["throughput"] = _fields(self.throughput)
        if self.time_per_rollout is not None:
            out["time_per_rollout"] = _fields(self.time_per_rollout)
        if self.progress is not None:
            out["progress"] = _fields(self.progress)
        out["checkpoint"] = self.checkpoint.to_json()
        if self.zero_std_frac is not None:
            out["zero_std_frac"] = self.zero_std_frac
        if self.has_last_metric:
            out["since_last_metric_s"] = self.since_last_metric_s
        out.update(self.telemetry)
        return out


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}
