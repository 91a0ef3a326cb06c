"""A fixed, deterministic run as the console sees it, for the views' tests and the console benches.

Telemetry is a real backend.cluster.telemetry.ClusterSnapshot; metrics are miles-format log lines fed to
the real backend.signals.metrics collector and derived by backend.signals.derived; the log is the real
backend.signals.store.LogStore. Nothing here talks to Ray.
"""

from __future__ import annotations

from pathlib import Path

from backend.cluster.telemetry import ClusterSnapshot, GpuSnapshot, NodeSnapshot
from backend.signals.derived import RunFacts, derive_run_signals
from backend.signals.metrics import MetricsCollector
from backend.signals.monitor import MetricsSnapshot
from backend.signals.store import LogStore

T0 = 1_767_268_800.0  # 2026-01-01 12:00:00 UTC
JOB = "ultra-console-260101-120000-000"


def snapshot(
    nodes: int = 16,
    gpus: int = 8,
    *,
    dead: tuple[int, ...] = (5,),
    no_telemetry: tuple[int, ...] = (9,),
    phase: int = 0,
) -> ClusterSnapshot:
    """`nodes` x `gpus` with utilisation/memory from a fixed formula; `phase` shifts the values."""
    out = []
    for n in range(nodes):
        alive = n not in dead
        cells = None
        if alive and n not in no_telemetry:
            cells = [
                GpuSnapshot(
                    index=g,
                    utilization_pct=float((n * 37 + g * 11 + phase * 7) % 101),
                    mem_used_mb=int(143_771 * (((n * 5 + g * 3 + phase) % 10) / 10)),
                    mem_total_mb=143_771,
                )
                for g in range(gpus)
            ]
        out.append(
            NodeSnapshot(
                node_id=f"{n:02d}" + "ab" * 27,
                name=f"node-{n:02d}",
                ip=f"10.0.{n // 250}.{n % 250}",
                alive=alive,
                state="ALIVE" if alive else "DEAD",
                death_reason=None if alive else "health check failed: missing heartbeats",
                gpus=cells,
                logical_gpus_total=float(gpus),
            )
        )
    return ClusterSnapshot(nodes=out, taken_at=T0)


def metric_lines(rollouts: int = 12) -> str:
    """miles' own line shapes (the metrics.py, log_utils.py and train_metric_utils.py lines of a rollout),
    values from a fixed formula."""
    lines = []
    for i in range(rollouts):
        ts = f"2026-01-01 12:{i:02d}:10.000"
        lines.append(
            f"(RolloutManager pid=51234, ip=10.0.0.1) [{ts} rollout_manager] metrics.py:89 - perf {i}: "
            f"{{'perf/rollout_time': {30 + i % 5}.5, 'perf/tokens_per_gpu_per_sec': {12 + (i * 7) % 9}.25}}"
        )
        lines.append(
            f"(MegatronTrainRayActor pid=52001, ip=10.0.0.1) [{ts} actor_cell0_rank0] log_utils.py:123 - "
            f"rollout {i}: {{'rollout/raw_reward': {0.1 + i * 0.04:.3f}}}"
        )
        lines.append(
            f"(MegatronTrainRayActor pid=52001, ip=10.0.0.1) [{ts} actor_cell0_rank0] log_utils.py:542 - "
            f"step {i}: {{'train/ppo_kl': {0.001 * (i % 4):.4f}, 'train/train_rollout_kl': {0.0002 * i:.5f}, "
            f"'train/train_rollout_logprob_abs_diff': {0.010 + 0.0005 * (i % 3):.4f}, 'train/step': {i}}}"
        )
        lines.append(
            f"(MegatronTrainRayActor pid=52001, ip=10.0.0.1) [{ts} actor_cell0_rank0] "
            f"train_metric_utils.py:56 - perf {i}: {{'perf/train_time': "
            f"{12 + i % 3}.7, 'perf/step_time': 57.6}}"
        )
    return "\n".join(lines) + "\n"


def log_text(n: int = 300) -> str:
    """A run log: driver lines, interleaved actors on two nodes, metric lines, an error."""
    out = []
    for i in range(n):
        ts = f"2026-01-01 12:{(i // 60) % 60:02d}:{i % 60:02d}.000"
        if i % 50 == 0:
            out.append(f"[{ts} main] train.py:{i} - rollout {i // 50} starting")
        elif i % 3 == 0:
            out.append(
                f"(RolloutManager pid=51234, ip=10.0.0.1) [{ts} "
                f"rollout_manager] sglang.py:7 - generated batch {i}"
            )
        elif i % 3 == 1:
            out.append(
                f"(MegatronTrainRayActor pid=52001, ip=10.0.0.1) [{ts} actor_cell0_rank0] model.py:9 - "
                f"iteration {i} loss 0.{i:03d}"
            )
        else:
            out.append(
                f"(MegatronTrainRayActor pid=52002, ip=10.0.0.2) [{ts} actor_cell0_rank8] model.py:9 - "
                f"iteration {i} grad_norm 1.{i:03d}"
            )
    if n > 77:
        out[77] = out[77] + " NCCL WARN watchdog timeout"
    return "\n".join(out) + "\n"


def collector(rollouts: int = 12) -> MetricsCollector:
    c = MetricsCollector()
    c.feed_text(metric_lines(rollouts))
    return c


def store(tmp: Path, n: int = 300) -> LogStore:
    s = LogStore(tmp / "spool", run_id=JOB)
    s.append(log_text(n))
    return s


def metrics(rollouts: int = 12, num_rollout: int = 40) -> MetricsSnapshot:
    """The series and derived signals 12.5 minutes into the run: what a MetricsArrived carries."""
    c = collector(rollouts)
    facts = RunFacts()
    facts.pin("num_rollout", num_rollout)
    facts.pin("rollout_num_gpus", 128)
    facts.checkpoints.append((T0 + 5 * 60, 4))
    return MetricsSnapshot(c.series.snapshot(), derive_run_signals(c, facts, None, T0 + 12 * 60 + 30))
