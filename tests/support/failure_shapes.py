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
- "newest":    the "ray" shape, newest line first (only for scenarios whose lines carry timestamps);
- "excerpts":  excerpts of one post: the first line cut mid-line, a gap marker between the processes' blocks;
- "cut":       the "ray" shape whose last line is cut mid-line, with no newline after it (the log ends there).

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
CUT_HEAD = "cy=4 max_tokens_per_gpu=9216 use_dynamic_batch_size=True"  # an excerpt starts mid-line
GAP = "[... 1,214 lines omitted ...]"


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
    shapes: tuple[str, ...] = ("ray", "caret", "pasted", "replayed", "excerpts")
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


WORKER_DIED = (
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
    "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes."
)


def _actor_died(cls: str, pid: int, ip: str, reason: str) -> str:
    """Ray's ActorDiedError with its tab-indented field block and one reason sentence (§3b)."""
    return (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        f"\tclass_name: {cls}\n\tactor_id: 8e1c2f0a01000000\n\tpid: {pid}\n\tnamespace: 2b7c9d\n"
        f"\tip: {ip}\n{reason}"
    )


def _nccl_remote(r: int, group_rank: int) -> tuple[Proc, str]:
    """torch >= 2.5's async NCCL error on a rank whose peer went away: global rank r, rank group_rank in TP."""
    return (
        Proc("MegatronTrainRayActor", 4100 + r, "10.0.0.3"),
        f"[rank{r}]:[E1201 10:10:05.{100 + r} ProcessGroupNCCL.cpp:632] [Rank {group_rank}] Collective "
        f"WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) raised "
        f"the following async exception: NCCL error: remote process exited or there was a network error, NCCL "
        f"version 2.27.3",
    )


BRIDGE_MISSING = _traceback(  # an actor's init() without Megatron-Bridge in its environment
    [(ACTOR_PY, 90, "init", "from megatron.bridge import AutoBridge")],
    "ModuleNotFoundError: No module named 'megatron.bridge'",
)

SCENARIOS: tuple[Scenario, ...] = (
    # §3b: the node death is the root; the watchdog lines on the ranks that waited for it follow
    Scenario(
        "node died (older Ray wording), its peers' NCCL timeouts after",
        (
            _nccl_timed_out(0),
            _nccl_timed_out(1),
            (
                RAYLET,
                "The node with node id: 5f1e9a0c and ip: 10.0.3.9 has been marked dead because the detector "
                "has missed too many heartbeats from it.",
            ),
        ),
        Expect(
            "node-dead",
            None,
            "10.0.3.9",
            consequences=("nccl-timeout",),
            message_has=("node 10.0.3.9 (5f1e9a0c) died",),
        ),
    ),
    Scenario(
        "c10d store timeout to a container-bridge address",
        (
            (
                TRAIN,
                _traceback(
                    [(ACTOR_PY, 88, "init", "dist.init_process_group(backend='nccl')")],
                    "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while "
                    "trying to connect to (172.17.0.2, 29500).",
                ),
            ),
            (
                None,
                _ray_task(
                    "MegatronTrainRayActor",
                    "init",
                    4101,
                    "10.0.0.3",
                    "DistNetworkError",
                    "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while "
                    "trying to connect to (172.17.0.2, 29500).",
                    [(ACTOR_PY, 88, "init", "dist.init_process_group(backend='nccl')")],
                ),
            ),
        ),
        Expect(
            "c10d-store-timeout",
            "train",
            "10.0.0.3",
            "4101",
            consequences=("ray-task-error",),
            message_has=("172.17.0.2:29500", "container-bridge"),
            frame=f"{ACTOR_PY}:88 in init",
        ),
    ),
    # §3b: ActorDiedError's field block names the actor that died; its reason sentence selects the kind
    Scenario(
        "ActorDiedError block: another framework's SGLang server's worker process died",
        (
            (None, _traceback(DRIVER_GET, _actor_died("SGLangHttpServer", 5311, "10.0.3.9", WORKER_DIED))),
            (None, BANNER),
        ),
        Expect(
            "actor-died",
            "engine",
            "10.0.3.9",
            "5311",
            consequences=("job-failed",),
            message_has=(
                "SGLangHttpServer pid=5311 on 10.0.3.9",
                "its worker process has died",
                "SYSTEM_ERROR",
            ),
        ),
    ),
    Scenario(
        "ActorDiedError block: its node died, the peers' NCCL timeouts before it",
        (
            _nccl_timed_out(0),
            _nccl_timed_out(1),
            (
                None,
                _traceback(
                    DRIVER_GET,
                    _actor_died(
                        "MegatronTrainRayActor",
                        41017,
                        "10.0.3.9",
                        "The actor died because its node has died. Node Id: 5f1e9a0c\n"
                        "\tthe actor's node was terminated unexpectedly: health check failed due to missing too "
                        "many heartbeats",
                    ),
                ),
            ),
        ),
        Expect(
            "node-dead",
            "train",
            "10.0.3.9",
            "41017",
            consequences=("nccl-timeout", "actor-died"),
            message_has=("node 10.0.3.9 (5f1e9a0c) died", "MegatronTrainRayActor pid=41017"),
        ),
    ),
    Scenario(
        "ActorDiedError block: killed for host memory (NODE_OUT_OF_MEMORY)",
        (
            (
                ROLLOUT,
                _traceback(
                    [("/root/miles/miles/ray/rollout.py", 210, "generate", "ray.get(refs)")],
                    _actor_died(
                        "SGLangEngine",
                        5300,
                        "10.0.0.4",
                        "The actor is dead because its worker process has died. Worker exit type: "
                        "NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on "
                        "memory.",
                    ),
                ),
            ),
        ),
        Expect(
            "host-oom",
            "engine",
            "10.0.0.4",
            "5300",
            consequences=("actor-died",),
            message_has=("SGLangEngine pid=5300 on 10.0.0.4", "host memory"),
        ),
    ),
    Scenario(
        "ActorDiedError block: the owner's node crashed",
        (
            (
                None,
                _traceback(
                    DRIVER_GET,
                    _actor_died(
                        "RolloutManager",
                        5100,
                        "10.0.3.8",
                        "The actor is dead because its owner has died. Owner Id: 05000000ffff Owner Ip address: "
                        "10.0.3.7 Owner worker exit type: SYSTEM_ERROR Worker exit detail: Owner's node has crashed.",
                    ),
                ),
            ),
        ),
        Expect(  # the block names the actor that died; its owner (the root's process) is said apart
            "owner-node-crashed",
            "rollout",
            "10.0.3.8",
            "5100",
            consequences=("actor-died",),
            message_has=("RolloutManager pid=5100 on 10.0.3.8 died", "owner crashed", "on 10.0.3.7"),
        ),
    ),
    Scenario(
        "an IB completion error names the peer, ncclRemoteError on the ranks after",
        (
            (
                TRAIN,
                "node-07:41017:41388 [3] transport/net_ib.cc:2458 NCCL WARN NET/IB: Got completion from peer "
                "10.0.3.9<49152> with status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_3",
            ),
            _nccl_remote(12, 4),
            _nccl_remote(13, 5),
        ),
        Expect(
            "ib-completion",
            "train",
            "10.0.0.3",
            "4101",
            consequences=("nccl-remote", "nccl-remote"),  # one per rank that lost its peer
            message_has=("InfiniBand on node-07 (GPU 3)", "10.0.3.9", "transport retry counter exceeded"),
        ),
    ),
    Scenario(
        "ncclRemoteError alone: the global rank and the group rank told apart",
        (_nccl_remote(12, 4),),
        Expect(
            "nccl-remote",
            "train",
            "10.0.0.3",
            "4112",
            rank="12",
            message_has=("a peer exited or the network failed",),
        ),
    ),
    Scenario(
        "a node's raylet died under a train actor",
        (
            (
                Proc("MegatronTrainRayActor", 4101, "10.0.3.9"),
                "Terminating the worker due to local raylet death",
            ),
            (
                None,
                _traceback(
                    DRIVER_GET,
                    "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more "
                    "information.",
                ),
            ),
        ),
        Expect("raylet-died", "train", "10.0.3.9", "4101", message_has=("10.0.3.9",)),
    ),
    Scenario(
        "a worker crashed with no other word: Ray's WorkerCrashedError is all there is",
        (
            (
                ROLLOUT,
                _traceback(
                    [("/root/miles/miles/ray/rollout.py", 210, "generate", "ray.get(refs)")],
                    "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. "
                    "Check python-core-worker-*.log files for more information.",
                ),
            ),
            (None, BANNER),
        ),
        Expect(
            "worker-crashed",
            "rollout",
            pid="5100",
            consequences=("job-failed",),
            message_has=("RolloutManager pid=5100", "died unexpectedly"),
            frame="/root/miles/miles/ray/rollout.py:210 in generate",
        ),
    ),
    Scenario(
        "a CUDA error pasted without prefixes: Megatron's frames say the train side",
        (
            (
                None,
                _traceback(
                    [
                        (
                            "/usr/lib/python3.11/runpy.py",
                            198,
                            "_run_module_as_main",
                            "return _run_code(code)",
                        ),
                        (ACTOR_PY, 571, "train", "loss = self.model(batch)"),
                        (
                            "/root/Megatron-LM/megatron/core/models/gpt/gpt_model.py",
                            301,
                            "forward",
                            "hidden_states = self.decoder(hidden_states)",
                        ),
                        (
                            "/usr/lib/python3/site-packages/torch/nn/modules/module.py",
                            1751,
                            "_call_impl",
                            "return forward_call(*args, **kwargs)",
                        ),
                    ],
                    "RuntimeError: CUDA error: an illegal memory access was encountered",
                ),
            ),
        ),
        Expect(
            "cuda-error",
            "train",
            message_has=("train code", "illegal memory access"),
            frame="/root/Megatron-LM/megatron/core/models/gpt/gpt_model.py:301 in forward",
        ),
    ),
    # §3b: a weight sync that stops, then only a driver traceback that says nothing of why
    Scenario(
        "a weight sync stood still, then a driver traceback",
        (
            (
                TRAIN,
                "[2026-03-02 10:00:05] log_utils.py:443 - step 6: {'train/loss': 0.012, 'train/grad_norm': 0.2}",
            ),
            (TRAIN, "[2026-03-02 10:00:06] timer.py:31 - Timer update_weights start"),
            (ROLLOUT, "[2026-03-02 10:05:06] rollout.py:88 - waiting for the engines' weights"),
            (ROLLOUT, "[2026-03-02 10:19:07] rollout.py:88 - waiting for the engines' weights"),
            (None, _traceback(DRIVER_GET, "KeyboardInterrupt")),
        ),
        Expect(
            "stall",
            "train",
            "10.0.0.3",
            "4101",
            consequences=("python-error",),
            message_has=("update_weights stood still for 19m01s", "started 2026-03-02 10:00:06"),
        ),
    ),
    # a run that is over (a saved log read whole) whose log simply ends while a phase stands still: no error
    Scenario(
        "a weight sync stood still and the log ends there",
        (
            (
                TRAIN,
                "[2026-03-02 10:00:05] log_utils.py:443 - step 6: {'train/loss': 0.012, 'train/grad_norm': 0.2}",
            ),
            (TRAIN, "[2026-03-02 10:00:06] timer.py:31 - Timer update_weights start"),
            (ROLLOUT, "[2026-03-02 10:05:06] rollout.py:88 - waiting for the engines' weights"),
            (ROLLOUT, "[2026-03-02 10:19:07] rollout.py:88 - waiting for the engines' weights to arrive"),
        ),
        Expect(
            "stall",
            "train",
            "10.0.0.3",
            "4101",
            message_has=(
                "update_weights stood still for 19m01s",
                "started 2026-03-02 10:00:06",
                "until the log ends, with no error after it",
            ),
        ),
        shapes=("ray", "caret", "pasted", "cut"),
    ),
    Scenario(
        "a rollout's generation stood still and the log ends there",
        (
            (
                TRAIN,
                "[2026-03-02 09:58:00] log_utils.py:443 - step 6: {'train/loss': 0.012, 'train/grad_norm': 0.2}",
            ),
            (ROLLOUT, "[2026-03-02 10:00:00] timer.py:31 - Timer generate start"),
            (ENGINE, '[2026-03-02 10:04:30] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK'),
            (ENGINE, '[2026-03-02 10:12:30] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK'),
        ),
        Expect(
            "stall",
            "rollout",
            None,
            "5100",
            message_has=("generate stood still for 12m30s", "started 2026-03-02 10:00:00", "log ends"),
        ),
        shapes=("ray", "caret", "pasted", "cut"),
    ),
    Scenario(
        "a log that ends a minute into a weight sync is no stall",
        (
            (
                TRAIN,
                "[2026-03-02 10:00:05] log_utils.py:443 - step 6: {'train/loss': 0.012, 'train/grad_norm': 0.2}",
            ),
            (TRAIN, "[2026-03-02 10:00:06] timer.py:31 - Timer update_weights start"),
            (ROLLOUT, "[2026-03-02 10:01:06] rollout.py:88 - waiting for the engines' weights to arrive"),
        ),
        None,
        shapes=("ray", "caret", "pasted", "cut"),
    ),
    Scenario(
        "a weight sync that went on to the next step is no stall at the log's end",
        (
            (TRAIN, "[2026-03-02 10:00:06] timer.py:31 - Timer update_weights start"),
            (
                TRAIN,
                "[2026-03-02 10:19:05] log_utils.py:443 - step 7: {'train/loss': 0.012, 'train/grad_norm': 0.2}",
            ),
            (ROLLOUT, "[2026-03-02 10:30:07] rollout.py:88 - waiting for the engines' weights to arrive"),
        ),
        None,
        shapes=("ray", "caret", "pasted", "cut"),
    ),
    Scenario(
        "a weight sync that ended is no stall: the OOM after it is the cause",
        (
            (TRAIN, "[2026-03-02 10:00:06] timer.py:31 - Timer update_weights start"),
            (TRAIN, "[2026-03-02 10:19:06] timer.py:41 - Timer update_weights end (elapsed: 1140.0s)"),
            (TRAIN, _traceback([(ACTOR_PY, 571, "train", "loss = self.model(batch)")], OOM_LINE)),
        ),
        Expect("cuda-oom", "train", "10.0.0.3", "4101", gpu="3"),
    ),
    Scenario(
        "torch_memory_saver invalid argument, then ActorUnavailableError",
        (
            (
                ENGINE,
                "[torch_memory_saver.cpp] CUresult error: 1 (invalid argument)  file=csrc/core.cpp func=free "
                "line=121",
            ),
            (
                None,
                _traceback(
                    DRIVER_GET,
                    "ray.exceptions.ActorUnavailableError: The actor 8e1c01000000 is unavailable: The actor is "
                    "temporarily unavailable: IOError: Connection reset. The task may or may not have been "
                    "executed on the actor.",
                ),
            ),
        ),
        Expect(
            "tms-curesult",
            "engine",
            "10.0.0.4",
            "5300",
            consequences=("actor-unavailable",),
            message_has=("free()", "CUDA error 1 (invalid argument)"),
        ),
    ),
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
            frame="/root/miles/miles/backends/megatron_utils/actor.py:571 in train",  # torch.nn machinery skipped
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
            message_has=("MegatronTrainRayActor pid=4101 for host memory on node 10.0.0.3", "1.9TB of 2.0TB"),
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
            # rank 2's only line is from before the timeout (10:00:01): it is unknown, not a healthy suspect
            message_has=("ALLREDUCE", "SeqNum 1580", "rank(s) 0, 1, 3", "1 rank(s) unknown (2)"),
            message_if_folded=(
                "ALLREDUCE",
                "rank(s) 0, 1, 3",
                "Ray folded 2 more watchdog line(s), so the log cannot say which ranks they were",
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
        Expect(  # §3b: ncclRemoteError is its own kind (a peer went away), not "an NCCL error here"
            "nccl-remote",
            "train",
            "10.0.0.3",
            "4101",
            message_has=("a peer exited or the network failed",),
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
                BRIDGE_MISSING,
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
        Expect(  # a full disk is its own kind (issue 26): the doubt still says Ray called it a success
            "disk-full", "train", "10.0.0.3", "4101", message_has=("No space left on device",), doubt=True
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
    elif shape == "excerpts":
        lines = [CUT_HEAD]
        for proc, text in scenario.blocks:
            lines += [*_lines(Scenario("", ((proc, text),), None), ESC_OPEN, ESC_CLOSE, every_line=True), GAP]
    elif shape == "cut":  # the log ends mid-line (a node died mid-write, a copy cut short)
        lines = _lines(scenario, ESC_OPEN, ESC_CLOSE, every_line=True)
        return "\n".join(lines)[: -max(8, len(lines[-1]) // 3)]
    elif shape == "newest":
        lines = list(reversed(_lines(scenario, ESC_OPEN, ESC_CLOSE, every_line=True)))
    else:
        raise ValueError(shape)
    return "\n".join(lines) + "\n"


def cases() -> list[tuple[Scenario, str]]:
    return [(s, shape) for s in SCENARIOS for shape in s.shapes]


# ---------------------------------------------------------------- multi-node runs of other frameworks (issue 26)
# From the libraries' own message skeletons (miles-log-formats.md §3b; torch elastic, vLLM, verl, OpenRLHF);
# every value invented.

WORKER_DICT = Proc("WorkerDict", 5678, "10.0.3.9")
LLM_ACTOR = Proc("LLMRayActor", 52311, "10.0.3.9")
VLLM_ACTOR = Proc("vLLMRayActor", 52312, "10.0.3.8")
TRAIN_R0 = Proc("MegatronTrainRayActor", 4100, "10.0.3.7")
TRAIN_R5 = Proc("MegatronTrainRayActor", 4105, "10.0.3.9")
DP_ACTOR_PY = "/workspace/verl/verl/workers/actor/dp_actor.py"
VERL_BASE_PY = "/workspace/verl/verl/single_controller/ray/base.py"
VLLM_RUNNER_PY = "/usr/local/lib/python3.11/dist-packages/vllm/v1/worker/gpu_model_runner.py"
VERL_FUNC = (VERL_BASE_PY, 645, "func", "return getattr(self.worker_dict[key], name)(*args, **kwargs)")
VLLM_EXEC = (VLLM_RUNNER_PY, 1302, "execute_model", "hidden_states = self.model(input_ids)")
ELASTIC_TRACE = [
    ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
    ("/usr/local/lib/python3.11/dist-packages/torch/distributed/run.py", 918, "main", "run(args)"),
    (
        "/usr/local/lib/python3.11/dist-packages/torch/distributed/launcher/api.py",
        288,
        "launch_agent",
        "raise ChildFailedError(",
    ),
]


def _elastic_failed(rank: int, local: int, exitcode: int, pid: int, traceback: str) -> str:
    """torch elastic's ChildFailedError and its root-cause table (torch/distributed/elastic/multiprocessing/
    errors/__init__.py: `_format_failure`)."""
    return (
        _traceback(ELASTIC_TRACE, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
        + "\n============================================================\n"
        "/root/verl/verl/trainer/main_ppo.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n"
        "  time      : 2026-12-01_10:00:05\n  host      : node-07\n"
        f"  rank      : {rank} (local_rank: {local})\n  exitcode  : {exitcode} (pid: {pid})\n"
        f"  error_file: <N/A>\n  traceback : {traceback}\n"
        "============================================================"
    )


def _dist_backend(text: str, detail: str) -> str:
    """torch's C10D_NCCL_CHECK raised in the calling thread: the error class, its detail and NCCL's last
    error text."""
    return (
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        f"ProcessGroupNCCL.cpp:3356, {text}, NCCL version 2.27.3\n{detail}"
    )


VERL_UPDATE = [
    VERL_FUNC,
    (DP_ACTOR_PY, 412, "update_policy", "loss.backward()"),
]
ELASTIC_GAP = (
    "[2026-12-01 10:00:05,120] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process"
)
ELASTIC_AGENT = (  # torch elastic's agent when a child died of SIGKILL (multiprocessing/api.py)
    f"{ELASTIC_GAP} 41018 closing signal SIGTERM\n"
    "[2026-12-01 10:00:05,456] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
    "local_rank: 3 (pid: 41017) of binary: /usr/bin/python3"
)

MULTINODE: tuple[Scenario, ...] = (
    Scenario(
        "26: torchrun child killed by SIGKILL, no error of its own (host OOM)",
        (
            (None, ELASTIC_AGENT),
            (None, _elastic_failed(27, 3, -9, 41017, "Signal 9 (SIGKILL) received by PID 41017")),
        ),
        Expect(  # torchrun runs trainers and engines alike: nothing here says which this child was
            "killed-by-signal",
            None,
            "node-07",
            "41017",
            rank="27",
            consequences=("elastic-child-failed",),
            message_has=("rank 27", "SIGKILL", "OOM killer"),
        ),
    ),
    Scenario(
        "26: torchrun child's own CUDA OOM, then ChildFailedError exitcode 1",
        (
            (
                None,
                "[rank27]:Traceback (most recent call last):\n"
                f'[rank27]:  File "{DP_ACTOR_PY}", line 412, in update_policy\n'
                "[rank27]:    loss.backward()\n"
                "[rank27]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 3 has a total "
                "capacity of 79.19 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has "
                "78.08 GiB memory in use.",
            ),
            (
                None,
                _elastic_failed(
                    27,
                    3,
                    1,
                    41017,
                    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
                ),
            ),
        ),
        Expect(  # the table's entry of rank 27 names its host and pid
            "cuda-oom",
            "train",
            "node-07",
            "41017",
            rank="27",
            gpu="3",
            consequences=("elastic-child-failed",),
            message_has=("GPU 3", "asked for 3.00 GiB"),
            frame=f"{DP_ACTOR_PY}:412 in update_policy",
        ),
    ),
    Scenario(
        "26: ncclUnhandledCudaError whose Last error is an illegal memory access",
        (
            (
                TRAIN,
                _traceback(
                    [(ACTOR_PY, 571, "train", "loss.backward()")],
                    _dist_backend(
                        "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                        "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
                        "Cuda failure 'an illegal memory access was encountered'",
                    ),
                ),
            ),
        ),
        Expect(
            "cuda-error",
            "train",
            "10.0.0.3",
            "4101",
            consequences=("nccl-error",),
            message_has=("an illegal memory access was encountered",),
        ),
    ),
    Scenario(
        "26: NCCL WARN Cuda failure on one GPU, then its DistBackendError",
        (
            (
                TRAIN,
                "node-07:4101:4188 [3] enqueue.cc:1556 NCCL WARN Cuda failure 'an illegal memory access was "
                "encountered'",
            ),
            (
                TRAIN,
                _traceback(
                    [(ACTOR_PY, 640, "update_weights", "dist.broadcast(t, src=0)")],
                    _dist_backend(
                        "unhandled cuda error", "ncclUnhandledCudaError: Call to CUDA function failed."
                    ),
                ),
            ),
        ),
        Expect(
            "cuda-error",
            "train",
            "10.0.0.3",
            "4101",
            gpu="3",
            consequences=("nccl-error",),
            message_has=("illegal memory access", "node-07"),
        ),
    ),
    Scenario(
        "26: ncclSystemError in a verl worker, RayTaskError in the driver",
        (
            (
                WORKER_DICT,
                _traceback(
                    [
                        (
                            VERL_BASE_PY,
                            645,
                            "func",
                            "return getattr(self.worker_dict[key], name)(*args, **kwargs)",
                        )
                    ],
                    _dist_backend(
                        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
                        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
                        "device error. \nLast error:\nsocketStartConnect: Connect to 10.0.3.8<43121> failed : "
                        "Software caused connection abort",
                    ),
                ),
            ),
            (
                None,
                _ray_task(
                    "WorkerDict",
                    "actor_rollout_init_model",
                    5678,
                    "10.0.3.9",
                    "DistBackendError",
                    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
                    "ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL "
                    "version 2.27.3",
                    [
                        (
                            VERL_BASE_PY,
                            645,
                            "func",
                            "return getattr(self.worker_dict[key], name)(*args, **kwargs)",
                        )
                    ],
                ),
            ),
        ),
        Expect(
            "nccl-error",
            "train",
            "10.0.3.9",
            "5678",
            consequences=("ray-task-error",),
            message_has=("unhandled system error", "WorkerDict pid=5678"),
        ),
    ),
    Scenario(
        "26: ncclInternalError raised in a train rank",
        (
            (
                TRAIN,
                _traceback(
                    [(ACTOR_PY, 640, "update_weights", "dist.all_gather(out, t)")],
                    _dist_backend(
                        "internal error - please report this issue to the NCCL developers",
                        "ncclInternalError: Internal check failed.\nLast error:\nMessage truncated : received 4096 "
                        "bytes instead of 2048",
                    ),
                ),
            ),
        ),
        Expect(
            "nccl-error",
            "train",
            "10.0.0.3",
            "4101",
            message_has=("internal error",),
            frame=f"{ACTOR_PY}:640 in update_weights",
        ),
    ),
    Scenario(
        "26: IBV_WC_RETRY_EXC_ERR (NCCL >= 2.29) names the peer, the watchdog after it",
        (
            (
                TRAIN,
                "[2026-12-01 10:00:05] node-07:4101:4388 [3] transport/net_ib/p2p.cc:512 NCCL WARN NET/IB : Got "
                "completion from peer 10.0.3.9<49152> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) "
                "vendor_err=129 hca mlx5_3",
            ),
            _nccl_timed_out(0),
            _nccl_timed_out(1),
        ),
        Expect(
            "ib-completion",
            "train",
            "10.0.0.3",
            "4101",
            rank="1",  # pid 4101 on 10.0.0.3 is the process whose watchdog line says [rank1]:
            consequences=("nccl-timeout",),
            message_has=("InfiniBand on node-07 (GPU 3)", "10.0.3.9", "transport retry counter exceeded"),
        ),
    ),
    Scenario(
        "26: NCCL <= 2.19 IB completion error 12 inside torch's Last error, no WARN line",
        (
            (
                TRAIN,
                "[rank12]:[E1201 10:10:05.112 ProcessGroupNCCL.cpp:632] [Rank 4] Collective WorkNCCL(SeqNum=1580, "
                "OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) raised the following "
                "async exception: NCCL error: remote process exited or there was a network error, NCCL version "
                "2.18.3\nncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
                "prematurely.\nLast error:\nNET/IB : Got completion from peer 10.0.3.9<49152> with error 12, opcode "
                "0, len 0, vendor err 129 (Send)",
            ),
        ),
        Expect(
            "ib-completion",
            "train",
            "10.0.0.3",
            "4101",
            rank="12",  # the tag is on torch's line only, not on NCCL's Last error text: the process's rank
            consequences=("nccl-remote",),
            message_has=("10.0.3.9", "transport retry counter exceeded"),
        ),
    ),
    Scenario(
        "26: NCCL socket closed by the remote peer, then ncclRemoteError on that rank",
        (
            (
                TRAIN,
                "node-07:4101:4390 [3] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
                "node-09.cluster<57324>",
            ),
            (
                TRAIN,
                "[rank12]:[E1201 10:10:05.112 ProcessGroupNCCL.cpp:632] [Rank 4] Collective WorkNCCL(SeqNum=1580, "
                "OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) raised the following "
                "async exception: NCCL error: remote process exited or there was a network error, NCCL version "
                "2.27.3",
            ),
        ),
        Expect(
            "nccl-remote",
            "train",
            "10.0.0.3",
            "4101",
            rank="12",
            message_has=("node-09.cluster",),
        ),
    ),
    Scenario(
        "26: c10d store server gone (recvValue failed): rank 0's own error first",
        (
            (
                TRAIN_R0,
                _traceback(
                    [(ACTOR_PY, 571, "train", "batch = self.data_iterator.next()")],
                    "KeyError: 'rollout_log_probs'",
                ),
            ),
            (
                TRAIN_R5,
                "[rank5]:[W1201 10:00:09.123456789 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on "
                "SocketImpl(fd=13, addr=[::ffff:10.0.3.9]:50432, remote=[::ffff:10.0.3.7]:29500): Failed to recv, got "
                "0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
            ),
        ),
        Expect(
            "python-error",
            "train",
            "10.0.3.7",
            "4100",
            consequences=("c10d-store-lost",),
            message_has=("KeyError: 'rollout_log_probs'",),
            frame=f"{ACTOR_PY}:571 in train",
        ),
    ),
    Scenario(
        "26: c10d sendBytes Broken pipe: the store's host is where to look",
        (
            (
                TRAIN_R5,
                "[rank5]:[W1201 10:00:09.123456789 TCPStore.cpp:122] [c10d] sendBytes failed on SocketImpl(fd=13, "
                "addr=[::ffff:10.0.3.9]:50432, remote=[::ffff:10.0.3.7]:29500): Broken pipe",
            ),
            (
                TRAIN_R5,
                _traceback(
                    [(ACTOR_PY, 640, "update_weights", "dist.barrier()")],
                    "torch.distributed.DistNetworkError: sendBytes failed on SocketImpl(fd=13, addr=[::ffff:10.0.3.9"
                    "]:50432, remote=[::ffff:10.0.3.7]:29500): Broken pipe",
                ),
            ),
        ),
        Expect(
            "c10d-store-lost",
            "train",
            "10.0.3.9",
            "4105",
            rank="5",
            message_has=("10.0.3.7:29500", "Broken pipe"),
        ),
    ),
    Scenario(
        "26: TCPStore timed out waiting for clients",
        (
            (
                TRAIN_R0,
                _traceback(
                    [(ACTOR_PY, 88, "init", "dist.init_process_group(backend='nccl')")],
                    "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 127/128 "
                    "clients joined.",
                ),
            ),
        ),
        Expect(
            "c10d-store-wait",
            "train",
            "10.0.3.7",
            "4100",
            message_has=("127/128", "601 s"),
            frame=f"{ACTOR_PY}:88 in init",
        ),
    ),
    Scenario(
        "26: gloo Connection closed by peer names the peer that died",
        (
            (
                WORKER_DICT,
                _traceback(
                    [
                        (
                            VERL_BASE_PY,
                            645,
                            "func",
                            "return getattr(self.worker_dict[key], name)(*args, **kwargs)",
                        )
                    ],
                    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
                    "peer [10.0.3.8]:14728",
                ),
            ),
        ),
        Expect(
            "gloo-peer-closed",
            "train",
            "10.0.3.9",
            "5678",
            message_has=("10.0.3.8", "WorkerDict pid=5678"),
        ),
    ),
    Scenario(
        "26: ActorDiedError block: its owner's worker process crashed",
        (
            (
                None,
                _traceback(
                    DRIVER_GET,
                    _actor_died(
                        "WorkerDict",
                        5678,
                        "10.0.3.9",
                        "The actor is dead because its owner has died. Owner Id: 05000000ffff Owner Ip address: "
                        "10.0.3.7 Owner worker exit type: SYSTEM_ERROR Worker exit detail: Owner's worker process has "
                        "crashed.",
                    ),
                ),
            ),
        ),
        Expect(  # the block names the actor that died (WorkerDict); the owner that crashed is said apart
            "owner-died",
            "train",
            "10.0.3.9",
            "5678",
            consequences=("actor-died",),
            message_has=(
                "WorkerDict pid=5678 on 10.0.3.9",
                "its owner crashed",
                "worker 05000000ffff on 10.0.3.7",
            ),
        ),
    ),
    Scenario(
        "26: OwnerDiedError names the owner's IP on the line after",
        (
            (
                None,
                _traceback(
                    DRIVER_GET,
                    "ray.exceptions.OwnerDiedError: Failed to retrieve object 00ffffffffffffffffffffffffff0100000002. "
                    "To see information about where this ObjectRef was created in Python, set the environment "
                    "variable RAY_record_ref_creation_sites=1 during `ray start` and `ray.init()`.\n\n"
                    "The object's owner has exited. This is the Python worker that first created the ObjectRef via "
                    "`.remote()` or `ray.put()`. Check cluster logs (`/tmp/ray/session_latest/logs/*9f8e7d*` at IP "
                    "address 10.0.3.9) for more information about the Python worker failure.",
                ),
            ),
        ),
        Expect(
            "worker-crashed",
            "driver",
            "10.0.3.9",
            message_has=("10.0.3.9",),
        ),
    ),
    Scenario(
        "26: ObjectLostError: every copy lost with a node",
        (
            (
                None,
                _traceback(
                    DRIVER_GET,
                    "ray.exceptions.ObjectLostError: Failed to retrieve object 00ffffffffffffffffffffffffff0100000003. "
                    "To see information about where this ObjectRef was created in Python, set the environment "
                    "variable RAY_record_ref_creation_sites=1 during `ray start` and `ray.init()`.\n\n"
                    "All copies of 00ffffffffffffffffffffffffff0100000003 have been lost due to node failure. Check "
                    "cluster logs (`/tmp/ray/session_latest/logs`) for more information about the failure.",
                ),
            ),
            (None, BANNER),
        ),
        Expect(
            "object-lost",
            "driver",
            consequences=("job-failed",),
            message_has=("lost", "node"),
        ),
    ),
    Scenario(
        "26: a train actor lost the GCS",
        (
            (
                TRAIN,
                "[2026-12-01 10:00:05,123 E 4101 4150] gcs_rpc_client.h:179: Failed to connect to GCS at address "
                "10.0.0.1:6379 within 5 seconds.",
            ),
            (
                TRAIN,
                "[2026-12-01 10:01:05,123 C 4101 4150] gcs_rpc_client.h:552: Failed to connect to GCS within 60 seconds. GCS may have been killed. It's either GCS is terminated "
                "by `ray stop` or is killed unexpectedly. If it is killed unexpectedly, see the log file "
                "gcs_server.out.",
            ),
        ),
        Expect(
            "gcs-lost",
            "train",
            "10.0.0.3",
            "4101",
            message_has=("lost the Ray head's GCS for 60 s",),
        ),
    ),
    Scenario(
        "26: a checkpoint save hit a full disk",
        (
            (
                TRAIN,
                _traceback(
                    [(ACTOR_PY, 700, "save_model", "torch.save(state, path)")],
                    "OSError: [Errno 28] No space left on device: '/root/shared_data/ckpt/iter_0000100/mp_rank_00/"
                    "model_optim_rng.pt'",
                ),
            ),
            (
                None,
                _ray_task(
                    "MegatronTrainRayActor",
                    "save_model",
                    4101,
                    "10.0.0.3",
                    "OSError",
                    "OSError: [Errno 28] No space left on device: '/root/shared_data/ckpt/iter_0000100/mp_rank_00/"
                    "model_optim_rng.pt'",
                    [(ACTOR_PY, 700, "save_model", "torch.save(state, path)")],
                ),
            ),
        ),
        Expect(
            "disk-full",
            "train",
            "10.0.0.3",
            "4101",
            consequences=("ray-task-error",),
            message_has=("No space left on device", "/root/shared_data/ckpt"),
            frame=f"{ACTOR_PY}:700 in save_model",
        ),
    ),
    Scenario(
        "26: Ray's object store spilled onto a full disk (OutOfDiskError)",
        (
            (
                ROLLOUT,
                _traceback(
                    [("/root/miles/miles/ray/rollout.py", 210, "generate", "ray.put(samples)")],
                    "ray.exceptions.OutOfDiskError: Local disk is full. The object cannot be created because the "
                    "local object store is full and the local disk's utilization is over capacity (95% by default)."
                    "Tip: Use `df` on this node to check disk usage and `ray memory` to check object store memory "
                    "usage.",
                ),
            ),
        ),
        Expect(
            "disk-full",
            "rollout",
            pid="5100",
            message_has=("disk is full",),
            frame="/root/miles/miles/ray/rollout.py:210 in generate",
        ),
    ),
    Scenario(
        "26: OpenRLHF vLLM engine OOM, EngineDeadError, the driver's RayTaskError",
        (
            (LLM_ACTOR, "ERROR 12-01 10:00:05 [core.py:586] EngineCore encountered a fatal error."),
            (
                LLM_ACTOR,
                _traceback(
                    [VLLM_EXEC],
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total "
                    "capacity of 79.19 GiB of which 800.00 MiB is free.",
                ),
            ),
            (
                None,
                _ray_task(
                    "LLMRayActor",
                    "generate",
                    52311,
                    "10.0.3.9",
                    "EngineDeadError",
                    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                    "(above) for the root cause.",
                    [
                        (
                            "/usr/local/lib/python3.11/dist-packages/vllm/v1/engine/core_client.py",
                            712,
                            "get_output",
                            "raise self._format_exception(outputs) from None",
                        )
                    ],
                ),
            ),
        ),
        Expect(
            "cuda-oom",
            "engine",
            "10.0.3.9",
            "52311",
            gpu="0",
            consequences=("ray-task-error", "python-error"),
            message_has=("GPU 0", "asked for 1.25 GiB"),
            frame=f"{VLLM_RUNNER_PY}:1302 in execute_model",
        ),
    ),
    Scenario(
        "26: verl driver RayTaskError wraps a worker's CUDA OOM (the worker's own print lost)",
        (
            (
                Proc("TaskRunner", 1234, "10.0.3.1"),
                _ray_task(
                    "WorkerDict",
                    "actor_rollout_update_actor",
                    5678,
                    "10.0.3.9",
                    "OutOfMemoryError",
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 2 has a total "
                    "capacity of 79.19 GiB of which 1.10 GiB is free.",
                    VERL_UPDATE,
                ),
            ),
        ),
        Expect(
            "cuda-oom",
            "train",
            "10.0.3.9",
            "5678",
            gpu="2",
            consequences=("ray-task-error",),
            message_has=("GPU 2", "WorkerDict pid=5678"),
            frame=f"{DP_ACTOR_PY}:412 in update_policy",
        ),
    ),
    Scenario(
        "26: uncorrectable ECC error in a vLLM engine",
        (
            (
                VLLM_ACTOR,
                _traceback(
                    [VLLM_EXEC],
                    "RuntimeError: CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors might be "
                    "asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
                ),
            ),
        ),
        Expect(
            "gpu-fault",
            "engine",
            "10.0.3.8",
            "52312",
            message_has=("uncorrectable ECC error",),
            frame=f"{VLLM_RUNNER_PY}:1302 in execute_model",
        ),
    ),
    Scenario(
        "26: unspecified launch failure in an SGLang scheduler",
        (
            (
                ENGINE,
                "[2026-03-02 10:00:05 TP2] Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2911, in '
                "run_scheduler_process\n"
                "    scheduler.event_loop_overlap()\n"
                "RuntimeError: CUDA error: unspecified launch failure",
            ),
            (
                ENGINE,
                "[2026-03-02 10:00:06] Received sigquit from a child process. It usually means the child failed.",
            ),
        ),
        Expect(
            "gpu-fault",
            "engine",
            "10.0.0.4",
            "5300",
            consequences=("sglang-scheduler", "engine-exit"),
            message_has=("unspecified launch failure",),
        ),
    ),
    Scenario(
        "26: SGLang scheduler SIGKILLed at start (exit code -9)",
        (
            (
                ENGINE,
                _traceback(
                    [
                        (
                            "/sgl-workspace/sglang/python/sglang/srt/entrypoints/engine.py",
                            841,
                            "_launch_subprocesses",
                            "raise RuntimeError(",
                        )
                    ],
                    "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 "
                    "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
                ),
            ),
        ),
        Expect(
            "killed-by-signal",
            "engine",
            "10.0.0.4",
            "5300",
            message_has=("SIGKILL", "OOM killer"),
        ),
    ),
    Scenario(
        "26: a train rank's segfault (faulthandler), the worker-died lines after",
        (
            (
                TRAIN,
                "Fatal Python error: Segmentation fault\n\nStack (most recent call first):\n"
                '  File "/root/Megatron-LM/megatron/core/transformer/moe/token_dispatcher.py", line 412 in '
                "token_permutation\n"
                '  File "/root/Megatron-LM/megatron/core/transformer/moe/moe_layer.py", line 201 in forward',
            ),
            (
                None,
                _traceback(
                    DRIVER_GET,
                    _actor_died("MegatronTrainRayActor", 4101, "10.0.0.3", WORKER_DIED),
                ),
            ),
        ),
        Expect(
            "fatal-signal",
            "train",
            "10.0.0.3",
            "4101",
            consequences=("actor-died",),
            message_has=("Segmentation fault",),
        ),
    ),
)
MULTINODE += (
    Scenario(
        "26: CUDA error: out of memory (a CUDA call, not the allocator) in an OpenRLHF actor",
        (
            (
                Proc("PolicyModelActor", 6100, "10.0.3.5"),
                _traceback(
                    [
                        (
                            "/root/OpenRLHF/openrlhf/trainer/ppo_utils/experience_maker.py",
                            301,
                            "make_experience",
                            "logits = self.actor(seqs)",
                        )
                    ],
                    "RuntimeError: CUDA error: out of memory\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
                    "assertions.",
                ),
            ),
        ),
        Expect(
            "cuda-oom",
            "train",
            "10.0.3.5",
            "6100",
            message_has=("CUDA call", "PolicyModelActor pid=6100"),
        ),
    ),
    Scenario(
        "26: gloo Read error: Connection reset by peer",
        (
            (
                WORKER_DICT,
                _traceback(
                    [VERL_FUNC],
                    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.0.3.8]:61234: "
                    "Connection reset by peer",
                ),
            ),
        ),
        Expect(
            "gloo-peer-closed",
            "train",
            "10.0.3.9",
            "5678",
            message_has=("10.0.3.8", "Connection reset by peer"),
        ),
    ),
    Scenario(
        "26: torch elastic's agent line only (its table cut from the excerpt): exit code -9",
        ((None, ELASTIC_AGENT),),
        Expect(
            "killed-by-signal",
            None,
            pid="41017",
            consequences=("elastic-child-failed",),
            message_has=("local rank 3", "SIGKILL", "OOM killer"),
        ),
    ),
    Scenario(
        "26: the launcher's shell says the trainer was Killed",
        (
            (None, "[2026-12-01 10:00:00] train.py:24 - Creating placement group with 8 GPUs..."),
            (
                None,
                "/bin/bash: line 1:  41017 Killed                  python3 /root/miles/train.py --actor-num-nodes 16",
            ),
        ),
        Expect(  # the shell's job is the launcher's command: no line says which role its process had
            "killed-by-signal",
            None,
            pid="41017",
            message_has=("Killed", "OOM killer", "/root/miles/train.py"),
        ),
    ),
)
MULTINODE += (
    Scenario(  # Ray prints the connect warning while a node comes up before the head answers: not the cause
        "26: a transient GCS connect warning at start, then the real error",
        (
            (
                TRAIN,
                "[2026-12-01 10:00:05,123 E 4101 4150] gcs_rpc_client.h:179: Failed to connect to GCS at address "
                "10.0.0.1:6379 within 5 seconds.",
            ),
            (
                TRAIN,
                BRIDGE_MISSING,
            ),
        ),
        Expect(
            "python-error",
            "train",
            "10.0.0.3",
            "4101",
            message_has=("ModuleNotFoundError: No module named 'megatron.bridge'",),
        ),
    ),
)
MULTINODE += (
    Scenario(
        "26: SLURM cancelled the step at its time limit",
        (
            (
                TRAIN,
                "[2026-12-01 09:59:00] log_utils.py:443 - step 6: {'train/loss': 0.012, 'train/grad_norm': 0.2}",
            ),
            (
                None,
                "slurmstepd: error: *** STEP 1234.0 ON node-07 CANCELLED AT 2026-12-01T10:00:05 DUE TO TIME LIMIT ***",
            ),
        ),
        Expect("job-cancelled", "driver", message_has=("SLURM cancelled 1234.0 on node-07", "TIME LIMIT")),
    ),
    Scenario(
        "26: SLURM saw the kernel's OOM killer in the step",
        (
            (
                None,
                "slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have been OOM "
                "Killed.",
            ),
            (None, "srun: error: node-07: task 3: Out Of Memory"),
        ),
        Expect(  # SLURM names no process: which role it had is unknown
            "host-oom", None, message_has=("OOM killer killed 1 process(es) of SLURM step 1234.0",)
        ),
    ),
    Scenario(
        "26: a pasted dmesg line: the kernel killed the trainer",
        (
            (
                None,
                "[Tue Dec  1 10:00:05 2026] Out of memory: Killed process 41017 (python3) total-vm:2101224kB, "
                "anon-rss:1931224kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4012kB oom_score_adj:0",
            ),
        ),
        Expect("host-oom", None, pid="41017", message_has=("killed python3 (pid 41017)",)),
    ),
    Scenario(
        "26: torch 1.x 'NCCL Error 2: unhandled system error'",
        (
            (
                TRAIN,
                _traceback(
                    [(ACTOR_PY, 640, "update_weights", "dist.all_reduce(t)")],
                    "RuntimeError: NCCL Error 2: unhandled system error",
                ),
            ),
        ),
        Expect("nccl-error", "train", "10.0.0.3", "4101", message_has=("unhandled system error",)),
    ),
)
MULTINODE += (
    Scenario(
        "26: vLLM's pynccl raises 'NCCL error: unhandled cuda error' in an engine",
        (
            (
                VLLM_ACTOR,
                _traceback(
                    [
                        (
                            "/usr/local/lib/python3.11/dist-packages/vllm/distributed/device_communicators/pynccl_wrapper.py",
                            330,
                            "NCCL_CHECK",
                            'raise RuntimeError(f"NCCL error: {error_str}")',
                        )
                    ],
                    "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                ),
            ),
        ),
        Expect("nccl-error", "engine", "10.0.3.8", "52312", message_has=("unhandled cuda error",)),
    ),
    Scenario(
        "26: ProcessGroupNCCL's watchdog got stuck on one rank",
        (
            (
                Proc("MegatronTrainRayActor", 4103, "10.0.0.3"),
                "[rank3]:[E1201 10:20:05.123 ProcessGroupNCCL.cpp:1405] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
                "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring "
                "enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang "
                "blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA api "
                "(for example, CudaEventDestroy), or other deadlock-prone behaviors.",
            ),
        ),
        Expect("nccl-watchdog-stuck", "train", "10.0.0.3", "4103", rank="3", message_has=("480 s",)),
    ),
)


# ---------------------------------------------------------------- issue 26, round 4: templates read in the
# libraries' own source (each scenario cites the file; every value invented)


def _elastic_entry(
    idx: int, when: str, rank: int, local: int, exitcode: int, pid: int, traceback: str
) -> str:
    """One failure of torch elastic's table (torch/distributed/elastic/multiprocessing/errors/__init__.py:
    `_FAILURE_FORMAT_TEMPLATE`; `time` is `datetime.isoformat(sep="_")`, `host` is `socket.getfqdn()`)."""
    return (
        f"[{idx}]:\n  time      : {when}\n  host      : node-07\n  rank      : {rank} (local_rank: {local})\n"
        f"  exitcode  : {exitcode} (pid: {pid})\n  error_file: <N/A>\n  traceback : {traceback}"
    )


def _elastic_table(others: list[str], root: str) -> str:
    """`ChildFailedError.format_msg`: every failure but the root under `Failures:`, the one with the earliest
    timestamp (`get_first_failure`) under `Root Cause`; the entries keep the failures dict's order."""
    return (
        _traceback(ELASTIC_TRACE, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
        + "\n============================================================\n"
        "/root/OpenRLHF/openrlhf/cli/train_sft.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n" + "\n".join(others) + "\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n" + root + "\n"
        "============================================================"
    )


SIGNAL = "Signal {n} ({name}) received by PID {pid}"  # ProcessFailure: the message of a child a signal ended
NO_TRACE = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"

MULTINODE += (
    Scenario(
        "26: torch elastic's table with three failures: the root entry (earliest) is the cause, the rest listed",
        (
            (
                None,
                _elastic_table(
                    [
                        _elastic_entry(0, "2026-12-01_10:00:07", 25, 1, 1, 41015, NO_TRACE),
                        _elastic_entry(
                            1,
                            "2026-12-01_10:00:06",
                            26,
                            2,
                            -9,
                            41016,
                            SIGNAL.format(n=9, name="SIGKILL", pid=41016),
                        ),
                    ],
                    _elastic_entry(
                        2,
                        "2026-12-01_10:00:05",
                        27,
                        3,
                        -9,
                        41017,
                        SIGNAL.format(n=9, name="SIGKILL", pid=41017),
                    ),
                ),
            ),
        ),
        Expect(
            "killed-by-signal",
            None,
            "node-07",
            "41017",
            rank="27",
            # the other SIGKILL entry and the table's own error, in the order the log said them
            consequences=("elastic-child-failed", "killed-by-signal"),
            message_has=(
                "rank 27 (local rank 3)",
                "2 more failed",
                "rank 25 (local rank 1, pid 41015)",
                "rank 26",
            ),
        ),
    ),
    Scenario(
        "26: torch elastic's table: the root exited 1 and its own error is cut from the excerpt",
        (
            (
                None,
                _elastic_table(
                    [_elastic_entry(0, "2026-12-01_10:00:09", 24, 0, 1, 41014, NO_TRACE)],
                    _elastic_entry(1, "2026-12-01_10:00:05", 25, 1, 1, 41015, NO_TRACE),
                ),
            ),
        ),
        Expect(
            "elastic-child-failed",
            None,
            "node-07",
            "41015",
            rank="25",
            message_has=("rank 25 (local rank 1)", "exit code 1", "1 more failed: rank 24"),
        ),
    ),
    Scenario(
        # src/ray/raylet/node_manager.cc: the raylet names the dead worker by its pid; the worker's own prefix
        # on its lines before says which actor that was
        "26: the raylet's worker-died line names a pid whose own lines say it was an engine",
        (
            (
                VLLM_ACTOR,
                "INFO 12-01 10:00:01 [gpu_model_runner.py:1302] Graph capturing finished in 12 secs",
            ),
            (
                RAYLET,
                "A worker died or was killed while executing a task by an unexpected system error. To troubleshoot "
                "the problem, check the logs for the dead worker. Lease ID: 0a1b Worker ID: 9f8e Node ID: 5f1e "
                "Worker IP address: 10.0.3.8 Worker port: 10123 Worker PID: 52312 Worker exit type: SYSTEM_ERROR "
                "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.",
            ),
        ),
        Expect(
            "actor-died",
            "engine",
            "10.0.3.8",
            "52312",
            message_has=("vLLMRayActor, pid 52312", "SYSTEM_ERROR"),
        ),
    ),
)
MULTINODE += (
    Scenario(
        # the kernel's OOM killer (mm/oom_kill.c: `Out of memory: Killed process %d (%s) total-vm:…`) pasted under
        # the job's log: the pid is a Ray worker's, and that worker's own prefix says which actor it was
        "26: a pasted dmesg line kills a pid whose own lines say it was a train actor",
        (
            (
                Proc("MegatronTrainRayActor", 41017, "10.0.3.9"),
                "[2026-12-01 09:59:58] model.py:301 - Timer train start",
            ),
            (
                None,
                "[Tue Dec  1 10:00:05 2026] Out of memory: Killed process 41017 (ray::MegatronTr) total-vm:2101224kB, "
                "anon-rss:1931224kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4012kB oom_score_adj:0",
            ),
        ),
        Expect("host-oom", "train", "10.0.3.9", "41017", message_has=("killed ray::MegatronTr (pid 41017)",)),
    ),
)
MULTINODE += (
    Scenario(
        # Ray >= 2.3 (src/ray/raylet/node_manager.cc `CreateOomKillMessageDetails`, python/ray/exceptions.py
        # `OutOfMemoryError`): the sentence ends its line, the task killed and the node's memory are on the next
        "26: Ray's OOM killer, newer wording: the detail line under the sentence names the actor killed",
        (
            (
                None,
                _traceback(
                    DRIVER_GET,
                    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
                    "Memory on the node (IP: 10.0.3.9, ID: 5f1e9a0c) where the task (actor ID: 9c1d2e3f, "
                    "name=MegatronTrainRayActor.__init__, pid=41017, memory used=182.40GB) was running was 1.90TB / "
                    "2.00TB (0.952), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: "
                    "6f2ec5c8) because it was the most recently scheduled task; to see more information about memory "
                    "usage on this node, use `ray logs raylet.out -ip 10.0.3.9`. To see the logs of the worker, use "
                    "`ray logs worker-6f2ec5c8*out -ip 10.0.3.9.`\nTop 10 memory users:\nPID\tMEM(GB)\tCOMMAND\n"
                    "41017\t182.40\tray::MegatronTrainRayActor.__init__",
                ),
            ),
        ),
        Expect(
            "host-oom",
            "train",
            "10.0.3.9",
            "41017",
            message_has=("MegatronTrainRayActor pid=41017", "1.90TB of 2.00TB"),
        ),
    ),
)
NODE_DIED_OLD = "The actor is dead because its node has died."
NODE_PREEMPTED = (
    "The actor died because its node has died. Node Id: 5f1e9a0c\n\tthe actor's node was preempted: The node was "
    "preempted by the cloud provider."
)
KILLED_BY_RAY_KILL = _traceback(  # gcs_actor_manager.cc GenKilledByApplicationCause
    DRIVER_GET,
    _actor_died("RolloutManager", 5100, "10.0.3.7", "The actor is dead because it was killed by `ray.kill`."),
)
SUCCEEDED = (
    "------------------------------------------\nJob 'raysubmit_Qx81abc' succeeded\n"
    "------------------------------------------"
)
MULTINODE += (
    Scenario(
        # src/ray/gcs/actor/gcs_actor_manager.cc GenKilledByApplicationCause: the program's own teardown
        "26: an actor the driver killed with ray.kill in a job that succeeded is no failure",
        (
            (
                TRAIN,
                "[2026-12-01 10:00:00] log_utils.py:443 - step 9: {'train/loss': 0.012, 'train/grad_norm': 0.2}",
            ),
            (None, KILLED_BY_RAY_KILL),
            (None, SUCCEEDED),
        ),
        None,
    ),
    Scenario(
        # the same teardown beside a real failure: the actor's own kill is how it ended, never why
        "26: an actor killed with ray.kill after another actor's CUDA error: the error is the cause",
        (
            (None, KILLED_BY_RAY_KILL),
            (
                ENGINE,
                _traceback(
                    [
                        (
                            "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py",
                            1201,
                            "run_batch",
                            "out = fwd()",
                        )
                    ],
                    "RuntimeError: CUDA error: an illegal memory access was encountered",
                ),
            ),
        ),
        Expect(
            "cuda-error",
            "engine",
            "10.0.0.4",
            "5300",
            consequences=("actor-died",),
            message_has=("illegal memory access",),
        ),
    ),
    Scenario(
        # python/ray/exceptions.py ActorUnavailableError (its `maynot` as printed); the run went on after it
        "26: ActorUnavailableError the run outlived is no death",
        (
            (ROLLOUT, "[2026-12-01 10:00:00] rollout.py:1 - rollout 3: {'rollout/reward': 0.5}"),
            (
                ROLLOUT,
                _traceback(
                    [("/root/miles/miles/ray/rollout.py", 210, "generate", "ray.get(refs)")],
                    "ray.exceptions.ActorUnavailableError: The actor 8e1c2f0a01000000 is unavailable: The actor is "
                    "temporarily unavailable: IOError: Connection reset. The task may or maynot have been executed on "
                    "the actor.",
                ),
            ),
            (ROLLOUT, "[2026-12-01 10:01:00] rollout.py:1 - rollout 4: {'rollout/reward': 0.5}"),
            (
                TRAIN,
                "[2026-12-01 10:02:00] log_utils.py:443 - step 4: {'train/loss': 0.01, 'train/grad_norm': 0.2}",
            ),
            (ROLLOUT, "[2026-12-01 10:03:00] rollout.py:1 - rollout 5: {'rollout/reward': 0.5}"),
            (
                TRAIN,
                "[2026-12-01 10:04:00] log_utils.py:443 - step 5: {'train/loss': 0.01, 'train/grad_norm': 0.2}",
            ),
        ),
        None,
        shapes=("ray", "caret", "pasted", "excerpts"),  # the banner's replay of the tail repeats old progress
    ),
    Scenario(
        # sglang 0.5.23 managers/tokenizer_manager.py SignalHandler and utils/watchdog.py: a child that aborted
        "26: SGLang 0.5.23: a scheduler child crashed with exit code -6, then SIGQUIT",
        (
            (
                ENGINE,
                "[2026-12-01 10:00:05] Subprocess scheduler_0 (pid=52311) crashed with exit code -6. Triggering "
                "SIGQUIT for cleanup...\n"
                "[2026-12-01 10:00:05] SIGQUIT received. signum=3, frame=<frame at 0x7f12a0, file "
                "'/usr/lib/python3.11/selectors.py', line 468, code select>. It usually means one child failed.",
            ),
        ),
        Expect(
            "engine-exit",
            "engine",
            "10.0.0.4",
            "5300",
            message_has=("scheduler_0 (pid 52311)", "exit code -6"),
        ),
    ),
    Scenario(
        # torch >= 2.4 ProcessGroupNCCL.cpp ncclCommWatchdog: the timeout re-thrown by the watchdog thread,
        # `terminate called` and the abort after it on the same rank
        "26: the watchdog thread terminated with the timeout, then the rank aborted",
        (
            (
                Proc("MegatronTrainRayActor", 4103, "10.0.3.9"),
                "[rank3]:[E1201 10:10:05.123456789 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
                "Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
                "Timeout(ms)=600000) ran for 600063 milliseconds before timing out.\n"
                "terminate called after throwing an instance of 'c10::DistBackendError'\n"
                "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with "
                "exception: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, "
                "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600063 "
                "milliseconds before timing out.\n"
                "Exception raised from ncclCommWatchdog at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
                "1601 (most recent call first):\n"
                "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f12 in "
                "/usr/local/lib/python3.11/dist-packages/torch/lib/libc10.so)\n"
                "Fatal Python error: Aborted",
            ),
        ),
        Expect(
            "nccl-timeout",
            "train",
            "10.0.3.9",
            "4103",
            rank="3",
            consequences=("fatal-signal",),
            message_has=("ALLREDUCE (SeqNum 1580)", "rank(s) 3"),
        ),
    ),
)
MULTINODE += (
    Scenario(
        # torch <= 2.0 socket.cpp SocketConnectOp::throwTimeoutError: the timeout is a std::chrono::seconds there
        "26: torch 2.0's c10d connect timeout, in seconds",
        (
            (
                TRAIN_R5,
                "[E socket.cpp:860] [c10d] The client socket has timed out after 1800s while trying to connect to "
                "(10.0.3.7, 29500).",
            ),
        ),
        Expect(
            "c10d-store-timeout",
            "train",
            "10.0.3.9",
            "4105",
            message_has=("10.0.3.7:29500", "within 1800s"),
        ),
    ),
    Scenario(
        # nccl src/misc/socket.cc socketProgressOpt: a recv that failed (not closed): the peer is named
        "26: NCCL's recv from a peer timed out (socketProgressOpt), then ncclRemoteError",
        (
            (
                TRAIN_R5,
                "node-09:41017:41388 [5] misc/socket.cc:63 NCCL WARN socketProgressOpt: Call to recv from "
                "10.0.3.7<43520> failed : Connection timed out",
            ),
            _nccl_remote(5, 1),
        ),
        Expect(
            "nccl-remote",  # one process's WARN line and its async error are one failure; its rank is global
            "train",
            "10.0.3.9",
            "4105",
            rank="5",
            message_has=("10.0.3.7", "look at 10.0.3.7 first"),
        ),
    ),
)
MULTINODE += (
    # older Ray (RayActorError, `The actor is dead because its node has died.`): the node is the root;
    # gcs_actor_manager.cc GenNodeDiedCause, AUTOSCALER_DRAIN_PREEMPTED: the block's second line says why
    *(
        Scenario(
            name,
            (
                (
                    None,
                    _traceback(DRIVER_GET, _actor_died("MegatronTrainRayActor", 41017, "10.0.3.9", reason)),
                ),
            ),
            Expect(
                "node-dead",
                "train",
                "10.0.3.9",
                "41017",
                consequences=("actor-died",),
                message_has=("MegatronTrainRayActor pid=41017", said),
            ),
        )
        for name, reason, said in (
            ("26: older Ray's RayActorError block: its node has died", NODE_DIED_OLD, "node 10.0.3.9 died"),
            (
                "26: ActorDiedError block: its node was preempted",
                NODE_PREEMPTED,
                "the node was preempted: The node was preempted by the cloud provider",
            ),
        )
    ),
    Scenario(
        # node_manager.cc: the raylet's OOM summary names the node only; older Ray's worker-died warning
        # (`RayTask ID:`) names the pid, whose own lines are not in the log: no actor is invented
        "26: the raylet's OOM summary, then an older worker-died warning: the node, no invented actor",
        (
            (
                RAYLET,
                "[2026-12-01 10:00:05,123 E 812 812] (raylet) node_manager.cc:3049: 1 Workers (tasks / actors) killed "
                "due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 5f1e9a0c, IP: "
                "10.0.3.9) over the last time period.",
            ),
            (
                None,
                "2026-12-01 10:00:06,000\tWARNING worker.py:2040 -- A worker died or was killed while executing a task "
                "by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker. "
                "RayTask ID: ffffffffffffffff Worker ID: 9f8e Node ID: 5f1e Worker IP address: 10.0.3.9 Worker port: "
                "10123 Worker PID: 41017 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits "
                "with a connection error code 2. End of file.",
            ),
        ),
        Expect(
            "host-oom",
            None,
            "10.0.3.9",
            consequences=("actor-died",),
            message_has=("killed 1 worker(s) on node 10.0.3.9",),
        ),
    ),
)
MULTINODE += (
    Scenario(
        # python/ray/exceptions.py: the driver's ray.get on the RolloutManager re-raises the ActorDiedError the
        # RolloutManager's own ray.get saw (`RayTaskError(ActorDiedError): ray::RolloutManager.generate()`): the
        # block under it names the engine that died; the caller only relays it
        "26: RayTaskError(ActorDiedError) in the caller: the block names the engine that died",
        (
            (
                None,
                _ray_task(
                    "RolloutManager",
                    "generate",
                    5100,
                    "10.0.3.7",
                    "ActorDiedError",
                    _actor_died("SGLangEngine", 5300, "10.0.0.4", WORKER_DIED),
                    [("/root/miles/miles/ray/rollout.py", 210, "generate", "ray.get(refs)")],
                ),
            ),
        ),
        Expect(
            "actor-died",
            "engine",
            "10.0.0.4",
            "5300",
            consequences=("ray-task-error",),
            message_has=("SGLangEngine pid=5300 on 10.0.0.4", "its worker process has died"),
        ),
    ),
)
MULTINODE += (
    Scenario(
        # torch/distributed/elastic/agent/server/api.py `_invoke_run`: a child killed, then the agent restarts
        # the worker group (torchrun --max-restarts): the run goes on, so the kill is no death
        "26: torch elastic restarts its worker group after a child was killed: no death",
        (
            (
                None,
                "[2026-12-01 10:00:05,456] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
                "local_rank: 3 (pid: 41017) of binary: /usr/bin/python3\n"
                "[2026-12-01 10:00:05,457] torch.distributed.elastic.agent.server.api: [INFO] [default] Worker group "
                "FAILED. 3/3 attempts left; will restart worker group",
            ),
        ),
        None,
    ),
)
MULTINODE += (
    Scenario(
        # torch <= 1.10 errors/__init__.py: `Root Cause:` first, then `Other Failures:`; no host row, `msg: "…"`
        "26: torch 1.10's elastic table: the root first, the other failures after it",
        (
            (
                None,
                _traceback(
                    ELASTIC_TRACE, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "
                )
                + "\n***************************************\n"
                "      /root/train.py FAILED\n"
                "=======================================\n"
                "Root Cause:\n[0]:\n  time: 2026-12-01_10:00:05\n  rank: 27 (local_rank: 3)\n"
                "  exitcode: -9 (pid: 41017)\n  error_file: <N/A>\n"
                '  msg: "Signal 9 (SIGKILL) received by PID 41017"\n'
                "=======================================\n"
                "Other Failures:\n[1]:\n  time: 2026-12-01_10:00:06\n  rank: 26 (local_rank: 2)\n"
                "  exitcode: -9 (pid: 41016)\n  error_file: <N/A>\n"
                '  msg: "Signal 9 (SIGKILL) received by PID 41016"\n'
                "***************************************",
            ),
        ),
        Expect(
            "killed-by-signal",
            None,
            pid="41017",
            rank="27",
            consequences=("elastic-child-failed", "killed-by-signal"),
            message_has=("rank 27 (local rank 3)", "SIGKILL"),
        ),
    ),
)

SCENARIOS += MULTINODE
