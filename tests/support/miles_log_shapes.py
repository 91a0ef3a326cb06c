"""Small miles runs printed in every line shape real logs hold (miles-log-formats.md §1-§3), with the series
they must give, computed here from the same numbers (not by the parser under test).

A run is `rollouts` rollouts of `steps_per_rollout` train steps. Per rollout: the rollout-side `perf` dict
(throughput, response lengths), the trainer's `rollout` dict, each `step` dict printed twice (two modules),
and the train-side `perf` dict (timings). Shapes:

- "2026-04": `(MegatronTrainRayActor pid=N) [2026-03-02 10:00:05] log_utils.py:443 - step 6: {...}`
- "newest":  `(MegatronTrainRayActorWithConcurrencyGroups pid=N) [2026-10-02 10:00:05.120 actor_cell0_rank0]
  log_utils.py:544 - ...`
- "bare":    `step 6: {...}` (train.py without Ray's prefix, or a pasted log)

Options: Ray's colour codes as ESC bytes or as caret text, Ray's repeat suffix on metric lines, CRLF line
ends, an ip on multi-node, noise lines between (SGLang rank-tag brackets, Megatron's `INFO file.py:69:`
logger, health checks, tqdm bars, the argument dump, tracebacks without a prefix).
"""

from __future__ import annotations

from dataclasses import dataclass

ESC_OPEN, ESC_CLOSE = "\x1b[2m\x1b[36m", "\x1b[0m"
CARET_OPEN, CARET_CLOSE = "^[[36m", "^[[0m"
REPEAT = (
    " [repeated 2x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log "
    "deduplication, or see https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html#log-deduplication for more options.)"
)

ACTORS = {
    "2026-04": ("MegatronTrainRayActor", "RolloutManager"),
    "newest": ("MegatronTrainRayActorWithConcurrencyGroups", "RolloutExecutor"),
}


@dataclass(frozen=True)
class Shape:
    format: str = "2026-04"  # 2026-04 | newest | bare
    rollouts: int = 3
    steps_per_rollout: int = 2
    colour: str = ""  # "" | esc | caret
    repeat_on_metrics: bool = False
    crlf: bool = False
    ip: str | None = None
    noise: bool = True


def step_values(step: int) -> dict[str, float]:
    return {
        "train/loss": round(0.5 - 0.01 * step, 6),
        "train/ppo_kl": round(-3.1e-05 * (step + 1), 12),
        "train/grad_norm": 0.2 + step,
        "train/step": step,
    }


def rollout_values(r: int) -> dict[str, float]:
    return {"rollout/raw_reward": 0.125 * (r + 1), "rollout/response_lengths": 200.0 + r}


def rollout_perf(r: int) -> dict[str, float]:
    return {
        "rollout/response_len/mean": 214.5 + r,
        "perf/rollout_time": 30.0 + r,
        "perf/tokens_per_gpu_per_sec": 13.5 + r,
        "perf/effective_tokens_per_gpu_per_sec": 13.0 + r,
    }


def train_perf(r: int) -> dict[str, float]:
    return {"perf/actor_train_time": 9.5 + r, "perf/train_time": 12.5 + r, "perf/step_time": 57.5 + r}


def expected_series(shape: Shape) -> dict[str, list[tuple[float, float]]]:
    """key -> [(step, value)] as the charts must show them: train keys on train/step, the rest on
    the rollout."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in range(shape.rollouts):
        for source in (rollout_perf(r), rollout_values(r), train_perf(r)):
            for key, value in source.items():
                out.setdefault(key, []).append((float(r), value))
        for k in range(shape.steps_per_rollout):
            step = r * shape.steps_per_rollout + k
            for key, value in step_values(step).items():
                if key != "train/step":
                    out.setdefault(key, []).append((float(step), value))
    return out


def _dict(values: dict[str, float]) -> str:
    return "{" + ", ".join(f"'{k}': {v!r}" for k, v in values.items()) + "}"


class _Printer:
    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.second = 0
        self.out: list[str] = []

    def stamp(self, proc: str) -> str:
        self.second += 1
        minute, sec = divmod(self.second, 60)
        if self.shape.format == "newest":
            return f"[2026-10-02 10:{minute:02d}:{sec:02d}.{(self.second * 37) % 1000:03d} {proc}] "
        return f"[2026-03-02 10:{minute:02d}:{sec:02d}] "

    def prefix(self, actor: str, pid: int) -> str:
        ip = f", ip={self.shape.ip}" if self.shape.ip else ""
        inner = f"({actor} pid={pid}{ip})"
        if self.shape.colour == "esc":
            return f"{ESC_OPEN}{inner}{ESC_CLOSE} "
        if self.shape.colour == "caret":
            return f"{CARET_OPEN}{inner}{CARET_CLOSE} "
        return f"{inner} "

    def metric(self, actor: str, pid: int, proc: str, where: str, message: str) -> None:
        if self.shape.format == "bare":
            line = message
        else:
            line = f"{self.prefix(actor, pid)}{self.stamp(proc)}{where} - {message}"
        if self.shape.repeat_on_metrics:
            line += REPEAT
        self.out.append(line)

    def noise(self, engine_pid: int) -> None:
        if not self.shape.noise:
            return
        if self.shape.format == "bare":
            self.out += [
                "  num_rollout ..................................... 3",
                "Capturing batches (bs=64 avail_mem=20.1 GB):  45%|████▍     | 9/20 [00:02<00:02]",
            ]
            return
        sg = self.prefix("SGLangEngine", engine_pid)
        self.out += [
            f"{sg}[2026-03-02 10:00:{self.second % 60:02d} DP0 TP0 EP3] Decode batch. #running-req: 64, #token: 10240",
            f'{sg}INFO:     127.0.0.1:52344 - "GET /health HTTP/1.1" 200 OK' + REPEAT,
            f"{self.prefix(ACTORS['2026-04'][0], 4100)}{self.stamp('actor_cell0_rank0')[:-1]} INFO checkpointing.py:69: loading",
            "Traceback (most recent call last):",
            '  File "train.py", line 10, in <module>',
        ]


def lines(shape: Shape) -> list[str]:
    """The run's log lines (without line ends)."""
    train, rollout = ACTORS["newest" if shape.format == "newest" else "2026-04"]
    p = _Printer(shape)
    for r in range(shape.rollouts):
        p.noise(5300)
        p.metric(
            rollout,
            5100,
            "rollout_executor" if shape.format == "newest" else "rollout_manager",
            "metrics.py:89",
            f"perf {r}: {_dict(rollout_perf(r))}",
        )
        p.metric(
            train, 5201, "actor_cell0_rank0", "log_utils.py:123", f"rollout {r}: {_dict(rollout_values(r))}"
        )
        for k in range(shape.steps_per_rollout):
            step = r * shape.steps_per_rollout + k
            body = f"step {step}: {_dict(step_values(step))}"
            p.metric(
                train,
                5201,
                "actor_cell0_rank0",
                "log_utils.py:443" if shape.format != "newest" else "log_utils.py:544",
                body,
            )
            p.metric(
                train,
                5201,
                "actor_cell0_rank0",
                "model.py:670" if shape.format != "newest" else "model.py:854",
                body,
            )  # printed twice by two modules
        p.metric(
            train, 5201, "actor_cell0_rank0", "train_metric_utils.py:44", f"perf {r}: {_dict(train_perf(r))}"
        )
    return p.out


def text(shape: Shape) -> str:
    end = "\r\n" if shape.crlf else "\n"
    return end.join(lines(shape)) + end


# ---------------------------------------------------------------- failures (§3)

OOM_TRACEBACK = [
    "(MegatronTrainRayActor pid=4101, ip=10.0.0.3) [torch_memory_saver.cpp] TorchMemorySaver::malloc return OOM"
    " size=2254857830" + REPEAT,
    "(MegatronTrainRayActor pid=4101, ip=10.0.0.3) Traceback (most recent call last):",
    '  File "/root/miles/miles/backends/megatron_utils/actor.py", line 571, in train',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB. GPU 3 has a total capacity of 139.80 GiB"
    " of which 1.02 GiB is free. Process 4101 has 138.77 GiB memory in use.",
    "ray.exceptions.RayTaskError(OutOfMemoryError): ray::MegatronTrainRayActor.train() (pid=4101, ip=10.0.0.3,"
    " actor_id=abc) torch.OutOfMemoryError: CUDA out of memory.",
]
OLD_TORCH_OOM = (
    "(MegatronTrainRayActor pid=4102) torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    "20.00 MiB (GPU 0; 79.15 GiB total capacity; 77.20 GiB already allocated; 10.12 MiB free; 78.00 GiB"
    " reserved in total by PyTorch)"
)
ACTOR_DIED = (
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
    "class_name: RolloutExecutor"
)
NAN_RESULT = (
    "(RolloutRayActor pid=77) [2025-06-01 10:00:00] rollout.py:1132 - Unexpected result nan for sample 3"
)
HEALTH_NOISE = (
    '(SGLangEngine pid=5300) INFO:     127.0.0.1:52344 - "GET /health HTTP/1.1" 200 OK' + REPEAT,
    '(SGLangEngine pid=5300) INFO:     127.0.0.1:52345 - "GET /metrics HTTP/1.1" 200 OK',
)
