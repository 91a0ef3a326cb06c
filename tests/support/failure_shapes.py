"""Runs that died, as real logs hold them (miles-log-formats.md §3), in the messy shapes real logs come in.

A scenario is what each process printed, in order: `(process, text)` where the process is a Ray actor
(`Proc`), the driver (None) or the raylet. The shapes render it as an operator finds it:

- "ray":       Ray's prefix on every line an actor printed, with its colour codes as ESC bytes (the live
               job log);
- "caret":     the prefix's colour codes as the literal text `^[[36m`, hard-wrapped at 110 columns mid-token;
- "pasted":    pasted into an issue: the prefix only on each block's first line, wrapped at 120 columns,
               inside a markdown fence and quoted with `> `;
- "replayed":  the "ray" shape with Ray's repeat suffix on repeated lines and the job banner's replay of
               the tail;
- "newest":    the "ray" shape, newest line first (only for scenarios whose lines carry timestamps).

Each scenario says what the diagnosis must find; the values are written here, not computed by the scanner.
"""

from __future__ import annotations

from dataclasses import dataclass

ESC_OPEN, ESC_CLOSE = "\x1b[2m\x1b[36m", "\x1b[0m"
CARET_OPEN, CARET_CLOSE = "^[[36m", "^[[0m"
REPEAT = (
    " [repeated 3x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log "
    "deduplication, or see https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html"
    "#log-deduplication for more options.)"
)
RAYLET = "raylet"


@dataclass(frozen=True)
class Proc:
    actor: str
    pid: int
    ip: str | None = "10.0.0.3"

    def prefix(self) -> str:
        ip = f", ip={self.ip}" if self.ip else ""
        return f"({self.actor} pid={self.pid}{ip})"


@dataclass(frozen=True)
class Expect:
    id: str
    role: str | None
    node: str | None = None
    pid: str | None = None
    rank: str | None = None
    gpu: str | None = None
    consequences: tuple[str, ...] = ()  # kinds, in the order the log said them
    message_has: tuple[str, ...] = ()
    frame: str | None = None
    doubt: bool = False
    message_if_folded: tuple[str, ...] | None = None  # in the "replayed" shape Ray folded the first line


@dataclass(frozen=True)
class Scenario:
    name: str
    blocks: tuple[tuple[Proc | str | None, str], ...]
    expect: Expect | None  # None: not a failure
    shapes: tuple[str, ...] = ("ray", "caret", "pasted", "replayed")
    succeeded: bool = False  # the job banner says it succeeded


TRAIN = Proc("MegatronTrainRayActor", 4101)
TRAIN_NEW = Proc("MegatronTrainRayActorWithConcurrencyGroups", 4102, "10.0.0.7")
ROLLOUT = Proc("RolloutManager", 5100, None)
ENGINE = Proc("SGLangEngine", 5300, "10.0.0.4")


def _traceback(frames: list[tuple[str, int, str, str]], error: str) -> str:
    body = ["Traceback (most recent call last):"]
    for file, line, func, code in frames:
        body += [f'  File "{file}", line {line}, in {func}', f"    {code}"]
    return "\n".join([*body, error])


ACTOR_PY = "/root/miles/miles/backends/megatron_utils/actor.py"
TRAIN_PY = "/root/miles/train.py"
OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB. GPU 3 has a total capacity of "
    "139.80 GiB of which 1.02 GiB is free. Process 4101 has 138.77 GiB memory in use. Of the allocated memory "
    "131.20 GiB is allocated by PyTorch."
)
DRIVER_GET = [(TRAIN_PY, 92, "<module>", "ray.get(handles)")]
BANNER = (
    "--------------------------------------------------------\n"
    "Job 'raysubmit_Qx81abc' failed\n"
    "--------------------------------------------------------\n"
    "Status message: Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 "
    "chars):"
)


def _ray_task(
    cls: str,
    method: str,
    pid: int,
    ip: str | None,
    inner: str | None,
    error: str,
    frames: list[tuple[str, int, str, str]],
) -> str:
    where = f"pid={pid}" + (f", ip={ip}" if ip else "")
    head = (
        f"ray.exceptions.RayTaskError{f'({inner})' if inner else ''}: ray::{cls}.{method}() ({where}, "
        f"actor_id=8f2c0a, repr=<{cls} object at 0x7f12>)"
    )
    lines = [head]
    for file, line, func, code in frames:
        lines += [f'  File "{file}", line {line}, in {func}', f"    {code}"]
    return _traceback(DRIVER_GET, head) + "\n" + "\n".join([*lines[1:], error])


def _nccl_timed_out(r: int) -> tuple[Proc, str]:
    """What torch's NCCL watchdog prints on a rank whose collective timed out."""
    return (
        Proc("MegatronTrainRayActor", 4100 + r, "10.0.0.3"),
        f"[rank{r}]:[E1201 10:10:05.{100 + r} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
        f"Timeout(ms)=600000) ran for 60006{r} milliseconds before timing out.\n"
        f"[rank{r}]:[E1201 10:10:05.{200 + r} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
        f"Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, "
        f"last completed NCCL work: 1579.\n"
        f"[rank{r}]:[E1201 10:10:05.{300 + r} ProcessGroupNCCL.cpp:630] [Rank {r}] To avoid data inconsistency, we "
        f"are taking the entire process down.",
    )


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "train OOM",
        (
            (TRAIN, "[torch_memory_saver.cpp] TorchMemorySaver::malloc return OOM size=2254857830"),
            (
                TRAIN,
                _traceback(
                    [
                        (ACTOR_PY, 571, "train", "self.train_actor(rollout_id)"),
                        (
                            "/usr/lib/python3/site-packages/torch/nn/modules/module.py",
                            1751,
                            "_call_impl",
                            "return forward_call(*args, **kwargs)",
                        ),
                    ],
                    OOM_LINE,
                ),
            ),
            (
                None,
                _ray_task(
                    "MegatronTrainRayActor",
                    "train",
                    4101,
                    "10.0.0.3",
                    "OutOfMemoryError",
                    OOM_LINE,
                    [(ACTOR_PY, 571, "train", "self.train_actor(rollout_id)")],
                ),
            ),
            (None, BANNER),
        ),
        Expect(
            "cuda-oom",
            "train",
            "10.0.0.3",
            "4101",
            gpu="3",
            consequences=("memory-saver-oom", "ray-task-error", "job-failed"),
            message_has=("GPU 3", "asked for 2.10 GiB", "1.02 GiB free of 139.80 GiB"),
            frame="/usr/lib/python3/site-packages/torch/nn/modules/module.py:1751 in _call_impl",
        ),
    ),
    Scenario(
        "rollout OOM (newest miles, timestamps)",
        (
            (ROLLOUT, "[2026-10-02 10:00:05.120 rollout_manager] rollout.py:1132 - start generate"),
            (
                ROLLOUT,
                _traceback(
                    [("/root/miles/miles/rollout/sglang_rollout.py", 310, "generate", "out = model(x)")],
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a "
                    "total capacity of 139.80 GiB of which 300.00 MiB is free.",
                ),
            ),
            (
                None,
                "[2026-10-02 10:00:07.001 main] train.py:92 - "
                + "ray.exceptions.RayTaskError(OutOfMemoryError): "
                "ray::RolloutManager.generate() (pid=5100, actor_id=1) torch.OutOfMemoryError: CUDA out of memory.",
            ),
        ),
        Expect(
            "cuda-oom",
            "rollout",
            None,
            "5100",
            gpu="0",
            consequences=("ray-task-error",),
            message_has=("GPU 0", "asked for 512.00 MiB"),
        ),
        shapes=("ray", "caret", "pasted", "replayed"),
    ),
    Scenario(
        "engine OOM in the scheduler",
        (
            (
                ENGINE,
                "[2026-03-02 10:00:05 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2911, in run_scheduler_process\n'
                "    scheduler.event_loop_overlap()\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 5 has a total capacity of "
                "139.80 GiB of which 610.00 MiB is free.",
            ),
            (
                ENGINE,
                "[2026-03-02 10:00:06] Received sigquit from a child process. It usually means the child failed.",
            ),
            (
                None,
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
                "class_name: SGLangEngine",
            ),
        ),
        Expect(
            "cuda-oom",
            "engine",
            "10.0.0.4",
            "5300",
            gpu="5",
            consequences=("sglang-scheduler", "engine-exit", "actor-died"),
            message_has=("GPU 5", "asked for 1.50 GiB"),
            frame="/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py:2911 in run_scheduler_process",
        ),
    ),
    Scenario(
        "torch_memory_saver CUresult",
        (
            (
                ENGINE,
                "[torch_memory_saver.cpp] CUresult error: 2 (out of memory) file=csrc/core.cpp func=malloc line=112",
            ),
            (None, BANNER),
        ),
        Expect(
            "memory-saver-oom",
            "engine",
            "10.0.0.4",
            "5300",
            consequences=("job-failed",),
            message_has=("SGLangEngine pid=5300", "file=csrc/core.cpp"),
        ),
    ),
    Scenario(
        "host OOM killer",
        (
            (
                None,
                "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory. Memory on the "
                "node (IP: 10.0.0.3, ID: 4f2a9c) where the task (actor ID: 9c1d77, name=MegatronTrainRayActor.__init__, "
                "pid=4101, memory used=182.40GB) was running was 1.9TB / 2.0TB (0.96), which exceeds the memory usage "
                "threshold of 0.95. Ray killed this worker (ID: 77ab) because it was the most recently scheduled task.",
            ),
            (
                RAYLET,
                "[2026-12-01 10:00:05,123 E 812 812] (raylet) node_manager.cc:3280: 1 Workers (tasks / actors) killed "
                "due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 4f2a9c, IP: 10.0.0.3)"
                " over the last time period. To see more information about the Workers killed on this node, use "
                "`ray logs raylet.out -ip 10.0.0.3`",
            ),
            (None, BANNER),
        ),
        Expect(
            "host-oom",
            "train",
            "10.0.0.3",
            "4101",
            consequences=("job-failed",),
            message_has=("MegatronTrainRayActor pid=4101 on 10.0.0.3", "1.9TB of 2.0TB"),
        ),
    ),
    Scenario(
        "RayTaskError without a type, the actor's traceback lost",
        (
            (
                None,
                "ray.exceptions.RayTaskError: ray::RolloutManager.generate() (pid=5100, ip=10.0.0.9, actor_id=3)",
            ),
            (None, BANNER),
        ),
        Expect(
            "ray-task-error",
            "rollout",
            "10.0.0.9",
            "5100",
            consequences=("job-failed",),
            message_has=("an error raised in RolloutManager.generate() (pid 5100 on 10.0.0.9)",),
        ),
    ),
    Scenario(
        "RayTaskError(AssertionError) with the remote traceback",
        (
            (
                None,
                _ray_task(
                    "RolloutManager",
                    "generate",
                    5100,
                    "10.0.0.9",
                    "AssertionError",
                    "AssertionError: rollout batch 31 is not a multiple of 8",
                    [("/root/miles/miles/ray/rollout.py", 201, "generate", "assert n % 8 == 0")],
                ),
            ),
        ),
        Expect(
            "python-error",
            "rollout",
            "10.0.0.9",
            "5100",
            consequences=("ray-task-error",),
            message_has=(
                "AssertionError: rollout batch 31 is not a multiple of 8",
                "RolloutManager pid=5100",
            ),
            frame="/root/miles/miles/ray/rollout.py:201 in generate",
        ),
    ),
    Scenario(
        "actor died in its creation task",
        (
            (
                None,
                "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, "
                "ray::SGLangEngine.__init__() (pid=5300, ip=10.0.0.4, actor_id=55, repr=<SGLangEngine>)",
            ),
        ),
        Expect(
            "actor-died",
            "engine",
            "10.0.0.4",
            "5300",
            message_has=("SGLangEngine died in its creation task",),
        ),
    ),
    Scenario(
        "a worker killed by a signal",
        (
            (
                None,
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
                "class_name: MegatronTrainRayActor",
            ),
            (
                None,
                "A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the "
                "problem, check the logs for the dead worker. Worker exit type: SYSTEM_ERROR Worker exit detail: "
                "Worker unexpectedly exits with a connection error code 2. SIGKILL",
            ),
        ),
        Expect(
            "actor-died",
            "train",
            consequences=("actor-died",),
            message_has=("MegatronTrainRayActor", "The actor died unexpectedly"),
        ),
    ),
    Scenario(
        "SGLang engine failed at start",
        (
            (
                ENGINE,
                "[2026-03-02 10:00:05 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1401, in '
                "init_memory_pool\n"
                '    raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")\n'
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            ),
            (
                ENGINE,
                "[2026-03-02 10:00:06] Received sigquit from a child process. It usually means the child failed.",
            ),
            (
                None,
                _ray_task(
                    "SGLangEngine",
                    "init",
                    5300,
                    "10.0.0.4",
                    "RuntimeError",
                    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
                    [
                        (
                            "/root/miles/miles/backends/sglang_utils/sglang_engine.py",
                            88,
                            "init",
                            "self.engine = launch()",
                        )
                    ],
                ),
            ),
        ),
        Expect(
            "sglang-scheduler",
            "engine",
            "10.0.0.4",
            "5300",
            consequences=("engine-exit", "ray-task-error", "python-error"),
            message_has=(
                "TP3",
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            ),
            frame="/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py:1401 in init_memory_pool",
        ),
    ),
    Scenario(
        "CUDA graph capture failed",
        (
            (
                ENGINE,
                "[2026-03-02 10:00:05 TP0] Capture cuda graph failed: CUDA out of memory. Tried to allocate 4.00 GiB."
                " GPU 1 has a total capacity of 139.80 GiB of which 2.00 GiB is free.",
            ),
            (
                ENGINE,
                "[2026-03-02 10:00:06] Received sigquit from a child process. It usually means the child failed.",
            ),
        ),
        Expect(
            "cuda-graph-capture",
            "engine",
            "10.0.0.4",
            "5300",
            consequences=("cuda-oom", "engine-exit"),
            message_has=("could not capture CUDA graphs", "Tried to allocate 4.00 GiB"),
        ),
    ),
    Scenario(
        "NCCL watchdog timeout",
        (
            *(_nccl_timed_out(r) for r in (0, 1, 3)),
            (
                Proc("MegatronTrainRayActor", 4102, "10.0.0.3"),
                "[rank2]:[W1201 10:00:01.000 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 2] using GPU 2 to perform "
                "barrier as devices used by this process are currently unknown.",
            ),
            (
                None,
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
                "class_name: MegatronTrainRayActor",
            ),
        ),
        Expect(
            "nccl-timeout",
            "train",
            "10.0.0.3",
            "4100",
            rank="0",
            consequences=("actor-died",),
            message_has=("ALLREDUCE", "SeqNum 1580", "rank(s) 0, 1, 3", "rank(s) 2 did not time out"),
            message_if_folded=(
                "ALLREDUCE",
                "rank(s) 0, 1, 3",
                "Ray folded 2 more watchdog line(s), so which ranks did not time out is not in the log",
            ),
        ),
    ),
    Scenario(
        "NCCL error",
        (
            (
                TRAIN,
                _traceback(
                    [(ACTOR_PY, 640, "update_weights", "dist.broadcast(t, src=0)")],
                    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
                    "NCCLUtils.hpp:268, remote process exited or there was a network error, NCCL version 2.21.5",
                ),
            ),
        ),
        Expect(
            "nccl-error",
            "train",
            "10.0.0.3",
            "4101",
            message_has=("remote process exited or there was a network error",),
            frame=f"{ACTOR_PY}:640 in update_weights",
        ),
    ),
    Scenario(
        "CUDA illegal memory access",
        (
            (
                TRAIN,
                _traceback(
                    [(ACTOR_PY, 571, "train", "loss.backward()")],
                    "RuntimeError: CUDA error: an illegal memory access was encountered",
                ),
            ),
            (
                TRAIN,
                "[torch_memory_saver.cpp] no memory error here: CUDA kernel errors might be asynchronously reported",
            ),
        ),
        Expect(
            "cuda-error",
            "train",
            "10.0.0.3",
            "4101",
            message_has=("an illegal memory access was encountered",),
        ),
    ),
    Scenario(
        "a node died",
        (
            (
                None,
                "ray.exceptions.NodeDiedError: The node with node id: 8d0e2cf1 and address: 10.0.0.5 and node name: "
                "10.0.0.5 has been marked dead because the detector has missed too many heartbeats from it.",
            ),
            (
                None,
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
                "class_name: MegatronTrainRayActor",
            ),
        ),
        Expect(
            "node-dead", "driver", "10.0.0.5", consequences=("actor-died",), message_has=("node 10.0.0.5",)
        ),
    ),
    Scenario(
        "NaN loss",
        (
            (
                TRAIN,
                "[2026-03-02 10:00:05] log_utils.py:443 - step 6: {'train/loss': 0.012, 'train/ppo_kl': -3.1e-05, "
                "'train/grad_norm': 0.21}",
            ),
            (
                TRAIN,
                "[2026-03-02 10:01:05] log_utils.py:443 - step 7: {'train/loss': nan, 'train/ppo_kl': nan, "
                "'train/grad_norm': 2955012562.82}",
            ),
        ),
        Expect("nan", "train", "10.0.0.3", "4101", message_has=("train/loss is nan",)),
    ),
    Scenario(
        "Python error at start in the driver",
        (
            (None, "[2026-03-02 10:00:00] train.py:24 - Creating placement group with 8 GPUs..."),
            (
                None,
                _traceback(
                    [
                        (TRAIN_PY, 30, "<module>", "args = parse_args()"),
                        (
                            "/root/miles/miles/utils/arguments.py",
                            1520,
                            "miles_validate_args",
                            "assert args.rollout_batch_size % args.n_samples_per_prompt == 0",
                        ),
                    ],
                    "AssertionError: rollout_batch_size must be a multiple of n_samples_per_prompt",
                ),
            ),
            (None, BANNER),
        ),
        Expect(
            "python-error",
            "driver",
            consequences=("job-failed",),
            message_has=("AssertionError: rollout_batch_size must be a multiple", "the driver", "at start"),
            frame="/root/miles/miles/utils/arguments.py:1520 in miles_validate_args",
        ),
    ),
    Scenario(
        "an error in an actor's init, before the first rollout",
        (
            (
                TRAIN_NEW,
                _traceback(
                    [(ACTOR_PY, 90, "init", "from megatron.bridge import AutoBridge")],
                    "ModuleNotFoundError: No module named 'megatron.bridge'",
                ),
            ),
        ),
        Expect(
            "python-error",
            "train",
            "10.0.0.7",
            "4102",
            message_has=("ModuleNotFoundError: No module named 'megatron.bridge'", "at start"),
        ),
    ),
    Scenario(
        "success with a traceback",
        (
            (
                TRAIN,
                _traceback(
                    [(ACTOR_PY, 700, "save", "torch.save(state, path)")],
                    "OSError: [Errno 28] No space left on device",
                ),
            ),
            (
                None,
                "------------------------------------------\nJob 'raysubmit_Qx81abc' succeeded\n"
                "------------------------------------------",
            ),
        ),
        Expect(
            "python-error", "train", "10.0.0.3", "4101", message_has=("No space left on device",), doubt=True
        ),
    ),
    Scenario(
        "a clean run with faulthandler dumps and a retried error",
        (
            (
                TRAIN,
                "[2026-03-02 10:00:05] log_utils.py:443 - step 0: {'train/loss': 0.5, 'train/ppo_kl': 0.0}",
            ),
            (
                ROLLOUT,
                "ConnectionError: HTTPConnectionPool(host='10.0.0.4', port=30000): Read timed out. Retrying in 5 s "
                "(attempt 1/3)",
            ),
            (
                TRAIN,
                "Thread 0x00007f3a2b7fe700 (most recent call first):\n"
                '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
                '  File "/usr/lib/python3.11/threading.py", line 622 in wait\n'
                "Current thread 0x00007f3a9c1b4740 (most recent call first):\n"
                '  File "/root/miles/train.py", line 120 in <module>',
            ),
            (
                None,
                "------------------------------------------\nJob 'raysubmit_Qx81abc' succeeded\n"
                "------------------------------------------",
            ),
        ),
        None,
    ),
)


# ---------------------------------------------------------------- shapes


def _lines(scenario: Scenario, prefix_open: str, prefix_close: str, *, every_line: bool) -> list[str]:
    out: list[str] = []
    for proc, text in scenario.blocks:
        for k, line in enumerate(text.split("\n")):
            if isinstance(proc, Proc) and (every_line or k == 0):
                out.append(f"{prefix_open}{proc.prefix()}{prefix_close} {line}")
            elif proc == RAYLET:
                out.append(f"{prefix_open}(raylet, ip=10.0.0.3){prefix_close} {line}")
            else:
                out.append(line)
    return out


def wrap(lines: list[str], width: int) -> list[str]:
    """A terminal's hard wrap: every line cut at `width` columns, mid-token."""
    out = []
    for line in lines:
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return out


def render(scenario: Scenario, shape: str) -> str:
    if shape == "ray":
        lines = _lines(scenario, ESC_OPEN, ESC_CLOSE, every_line=True)
    elif shape == "caret":
        lines = wrap(_lines(scenario, CARET_OPEN, CARET_CLOSE, every_line=True), 110)
    elif shape == "pasted":
        body = wrap(_lines(scenario, "", "", every_line=False), 120)
        lines = [
            "Here is the log of the run that died:",
            "",
            "> ```",
            *[f"> {line}" for line in body],
            "> ```",
        ]
    elif shape == "replayed":
        lines = _lines(scenario, ESC_OPEN, ESC_CLOSE, every_line=True)
        tail = lines[-8:]
        lines = [
            line + REPEAT if i == 0 and line.startswith(ESC_OPEN) else line for i, line in enumerate(lines)
        ]
        lines += ["", *tail]  # the banner's replay of the last lines
    elif shape == "newest":
        lines = list(reversed(_lines(scenario, ESC_OPEN, ESC_CLOSE, every_line=True)))
    else:
        raise ValueError(shape)
    return "\n".join(lines) + "\n"


def cases() -> list[tuple[Scenario, str]]:
    return [(s, shape) for s in SCENARIOS for shape in s.shapes]
