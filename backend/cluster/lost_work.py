"""What an abort loses: the training since the last checkpoint, in time, rollouts and GPU-hours.

The abort modal says this before the first confirmation, so the arithmetic lives here, once, and the
view only passes the numbers the run monitor derived.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.cluster.durations import fmt_duration


@dataclass(frozen=True)
class LostWork:
    """The run's progress since its last checkpoint; None where the log has not said yet."""

    since_checkpoint_s: float | None = None
    rollouts_done: int | None = None
    last_checkpoint_rollout: int | None = None
    checkpoints_saved: int | None = None
    gpus: int | None = None

    @property
    def rollouts(self) -> int | None:
        """Rollouts finished after the one the last checkpoint saved (rollout ids count from 0)."""
        if self.rollouts_done is None or self.last_checkpoint_rollout is None:
            return None
        return max(0, self.rollouts_done - self.last_checkpoint_rollout - 1)

    @property
    def gpu_hours(self) -> float | None:
        if self.since_checkpoint_s is None or not self.gpus:
            return None
        return self.since_checkpoint_s * self.gpus / 3600.0

    def text(self) -> str:
        parts = []
        if self.since_checkpoint_s is not None:
            parts.append(f"{fmt_duration(self.since_checkpoint_s)} of training since the last checkpoint")
        if self.rollouts is not None:
            parts.append(f"{self.rollouts} rollout(s)")
        if self.gpu_hours is not None:
            parts.append(f"≈{self.gpu_hours:.1f} GPU-hours")
        if parts:
            return "Will be lost: " + ", ".join(parts) + "."
        if self.checkpoints_saved == 0:
            return "No checkpoint has been saved yet: everything this run trained will be lost."
        return "Progress since the last checkpoint will be lost (its time is not known yet)."
