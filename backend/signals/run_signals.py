"""What a run's metrics say about the run as a whole (throughput, time per rollout, progress and ETA,
checkpoints), as typed values the views read by attribute; `to_json()` is the `derived` block `metrics --json`
prints, key for key as before."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
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

    @property
    def past_end(self) -> bool:
        """More rollouts done than num_rollout says (a resumed run given a smaller one, or an earlier
        attempt's lines in the log): no fraction and no ETA then, rather than "1127/30, ETA 0s"."""
        return past_num_rollout(self.rollouts_done, self.num_rollout)


def past_num_rollout(done: int, total: int | None) -> bool:
    return total is not None and 0 < total < done


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
class GpuSummary:
    """The newest reading of every GPU in the dashboard's `gpu_util` stream, folded."""

    count: int
    util_mean: float | None
    util_min: float | None
    nodes: Mapping[str, float]  # node -> mean utilisation of its GPUs


@dataclass(frozen=True, slots=True)
class PhaseStat:
    count: int
    median_s: float


@dataclass(frozen=True, slots=True)
class OpenPhase:
    """A phase that has begun on one rank and not ended (yet)."""

    node: str
    rank: int
    role: str
    name: str
    open_s: float | None  # how long it has been open, where the clock is known


@dataclass(frozen=True, slots=True)
class PhaseSummary:
    """The `phases` stream: durations of finished phases by name, and the phases open now."""

    by_name: Mapping[str, PhaseStat]
    open: tuple[OpenPhase, ...]


@dataclass(frozen=True, slots=True)
class EngineSummary:
    count: int  # engines seen
    totals: Mapping[str, float]  # metric -> summed (or, for fractions, averaged) over engines


@dataclass(frozen=True, slots=True)
class StreamsSummary:
    """What the dashboard's streams say, as of one snapshot (a part is None while its stream is silent)."""

    gpu: GpuSummary | None = None
    phases: PhaseSummary | None = None
    engines: EngineSummary | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.gpu is not None:
            out["gpu"] = {**_fields(self.gpu), "nodes": dict(self.gpu.nodes)}
        if self.phases is not None:
            out["phases"] = {name: _fields(stat) for name, stat in self.phases.by_name.items()}
            out["open_phases"] = [_fields(p) for p in self.phases.open]
        if self.engines is not None:
            out["engines"] = {"count": self.engines.count, "totals": dict(self.engines.totals)}
        return out


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
    streams: StreamsSummary = StreamsSummary()  # the dashboard streams' summary (gpus, phases, engines)

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
        out.update(self.streams.to_json())
        return out


def _fields(
    value: Throughput | TimePerRollout | Progress | GpuSummary | PhaseStat | OpenPhase,
) -> dict[str, Any]:
    """A block's fields by name, in order (the JSON keys `metrics --json` has always printed)."""
    return {f.name: getattr(value, f.name) for f in fields(value)}
