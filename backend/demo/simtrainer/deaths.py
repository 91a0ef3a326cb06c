"""How the simulated run dies (`--sim-fail`), in the words the real libraries print (miles-log-formats.md §3).

Why: the console names a failed run's cause from this text, so the simulator prints what SGLang's scheduler,
torch's NCCL watchdog and Ray's memory monitor print: their message skeletons, with invented values and the
real wall clock at print time (a test times the console from a line's own stamp). The CUDA OOM of a train
actor is in oom.py. This module only words the deaths; actors.py and driver.py decide who prints them and
how the process then ends.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from datetime import datetime

SCHEDULER_FRAMES = (  # SGLang 0.5's path from its scheduler process into the KV pool sizing that gives up
    ("managers/scheduler.py", 2912, "run_scheduler_process", "scheduler = Scheduler("),
    ("managers/scheduler.py", 318, "__init__", "self.tp_worker = TpModelWorker("),
    ("managers/tp_worker.py", 94, "__init__", "self.model_runner = ModelRunner("),
    ("model_executor/model_runner.py", 242, "__init__", "self.initialize(min_per_gpu_memory)"),
    ("model_executor/model_runner.py", 335, "initialize", "self.init_memory_pool("),
    ("model_executor/model_runner.py", 1311, "init_memory_pool", "raise RuntimeError("),
)
SGLANG_SRC = "/sgl-workspace/sglang/python/sglang/srt"
NOT_ENOUGH_MEMORY = "Not enough memory. Please try to increase --mem-fraction-static."
SERVER_DIED = "Server process terminated unexpectedly."  # miles' SGLangEngine.init(), its server gone


def _sglang_stamp() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def sglang_line(message: str, tags: str = "") -> str:
    """SGLang's logging format: `[time TP0] msg` in a scheduler process (its rank tags), `[time] msg` else."""
    return f"[{_sglang_stamp()}{' ' + tags if tags else ''}] {message}"


def scheduler_exception(tags: str = "TP0") -> str:
    """The scheduler's `logger.error(f"Scheduler hit an exception: {traceback}")`: one record, so the
    traceback's lines follow the stamped first line with no bracket of their own."""
    frames = "".join(
        f'  File "{SGLANG_SRC}/{path}", line {line}, in {fn}\n    {code}\n'
        for path, line, fn, code in SCHEDULER_FRAMES
    )
    return sglang_line(
        f"Scheduler hit an exception: Traceback (most recent call last):\n{frames}"
        f"RuntimeError: {NOT_ENOUGH_MEMORY}\n",
        tags,
    )


def sigquit_line() -> str:
    """What SGLang's engine process logs when its scheduler child dies (its SIGQUIT handler)."""
    return sglang_line("Received sigquit from a child process. It usually means the child failed.")


# ------------------------------------------------------------------ torch's NCCL watchdog
SEQ_TIMED_OUT = 1580  # invented, like the reference's: the work that timed out, one after the last completed
PG = "PG ID 0 PG GUID 0(default_pg)"


def _c10_prefix(rank: int, level: str, where: str) -> str:
    """torch's c10 logging: `[rank12]:[E1201 10:00:05.123456789 ProcessGroupNCCL.cpp:616] ` (month*100+day,
    unpadded; nanoseconds), local time."""
    now = time.time_ns()
    t = datetime.fromtimestamp(now / 1e9)
    return (
        f"[rank{rank}]:[{level}{t.month * 100 + t.day} {t.strftime('%H:%M:%S')}.{now % 1_000_000_000:09d} "
        f"{where}] "
    )


def _work(timeout_ms: int) -> str:
    return (
        f"WorkNCCL(SeqNum={SEQ_TIMED_OUT}, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
        f"Timeout(ms)={timeout_ms})"
    )


def watchdog_caught(rank: int, timeout_ms: int, ran_ms: int) -> str:
    return (
        f"[Rank {rank}] Watchdog caught collective operation timeout: {_work(timeout_ms)} ran for {ran_ms} "
        "milliseconds before timing out."
    )


def nccl_timeout_lines(rank: int, timeout_ms: int, ran_ms: int) -> list[str]:
    """One timed-out rank's watchdog, as torch 2.6 prints it before taking the process down."""
    caught = watchdog_caught(rank, timeout_ms, ran_ms)
    return [
        _c10_prefix(rank, "E", "ProcessGroupNCCL.cpp:616") + caught,
        _c10_prefix(rank, "E", "ProcessGroupNCCL.cpp:1785")
        + f"[{PG} Rank {rank}] Exception (either an error or "
        f"timeout) detected by watchdog at work: {SEQ_TIMED_OUT}, last enqueued NCCL work: "
        f"{SEQ_TIMED_OUT + 2}, last completed NCCL work: {SEQ_TIMED_OUT - 1}.",
        _c10_prefix(rank, "E", "ProcessGroupNCCL.cpp:630")
        + f"[Rank {rank}] Some NCCL operations have failed or "
        "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        _c10_prefix(rank, "E", "ProcessGroupNCCL.cpp:636")
        + f"[Rank {rank}] To avoid data inconsistency, we are "
        "taking the entire process down.",
        _c10_prefix(rank, "E", "ProcessGroupNCCL.cpp:1601")
        + f"[{PG} Rank {rank}] Process group watchdog thread "
        f"terminated with exception: {caught}",
    ]


def nccl_abort(rank: int, timeout_ms: int, ran_ms: int) -> None:
    """The watchdog's `std::terminate`: libstdc++'s last words, then SIGABRT (Ray's worker prints its own
    crash report). No core file is left behind."""
    sys.stderr.write(
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        f"  what():  [{PG} Rank {rank}] Process group watchdog thread terminated with exception: "
        f"{watchdog_caught(rank, timeout_ms, ran_ms)}\n"
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 "
        "(most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3c2e96c446 in "
        "/usr/local/lib/python3.12/dist-packages/torch/lib/libc10.so)\n"
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        "std::ratio<1l, 1000l> > >) + 0x282 (0x7f3be3a2a772 in "
        "/usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so)\n"
    )
    sys.stderr.flush()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.abort()


# ------------------------------------------------------------------ the network (§3b)
UNREACHABLE = ("10.255.255.1", 29500)  # a store address no node can reach (TEST-NET-like, never routed here)


class DistNetworkError(RuntimeError):
    """Stands for torch.distributed.DistNetworkError (the real one is torch's; the simulator has no torch)."""


def c10d_timeout_message(timeout_ms: int) -> str:
    host, port = UNREACHABLE
    return (
        f"The client socket has timed out after {timeout_ms}ms while trying to connect to ({host}, {port})."
    )


def c10d_timeout_line(rank: int, timeout_ms: int) -> str:
    """torch's c10d warning before the error is raised (socket.cpp's connect loop giving up)."""
    return _c10_prefix(rank, "E", "socket.cpp:1028") + "[c10d] " + c10d_timeout_message(timeout_ms)


def caught_error_lines() -> list[str]:
    """A caught and logged traceback (a request to an engine timed out once): the run goes on after it."""
    return [
        "Traceback (most recent call last):",
        '  File "/root/miles/miles/rollout/sglang_rollout.py", line 161, in generate',
        "    output = await post(url, payload)",
        "TimeoutError: simulated: the engine did not answer one request in time (it is logged and skipped)",
    ]


# ------------------------------------------------------------------ Ray's memory monitor (host OOM killer)
# The raylet's wording of Ray 2.4x-2.5x, which the miles runs of 2026 carry (Ray 2.60's raylet words it
# "N worker(s) were killed due to the node running low on memory. Memory on the node (IP, ID) was XGB used /
# YGB limit"). Invented figures: the simulator cannot exhaust a test machine's memory.
USED_GB, NODE_USED, NODE_TOTAL, FRACTION, THRESHOLD = 12.3, "1.9TB", "2.0TB", 0.96, 0.95


def host_oom_message(ip: str, node_id: str, actor_id: str, task: str, pid: int, worker_id: str) -> str:
    """`ray.exceptions.OutOfMemoryError`'s text for a task or actor the memory monitor killed."""
    return (
        f"Task was killed due to the node running low on memory. Memory on the node (IP: {ip}, ID: "
        f"{node_id}) where the task (actor ID: {actor_id}, name={task}, pid={pid}, memory used={USED_GB}GB) "
        f"was running was {NODE_USED} / {NODE_TOTAL} ({FRACTION}), which exceeds the memory usage threshold "
        f"of {THRESHOLD}. Ray killed this worker (ID: {worker_id}) because it was the most recently "
        "scheduled task; to see more information about memory usage on this node, use `ray logs raylet.out "
        f"-ip {ip}`. To see the logs of the worker, use `ray logs worker-{worker_id}*out -ip {ip}.\n"
        "Top 10 memory users:\nPID\tMEM(GB)\tCOMMAND\n"
        f"{pid}\t{USED_GB:.2f}\tray::{task}\n"
        "Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning "
        "more memory on this node or reducing task parallelism by requesting more CPUs per task. Set "
        "max_restarts and max_task_retries to enable retry when the task crashes due to OOM. To adjust the "
        "kill threshold, set the environment variable `RAY_memory_usage_threshold` when starting Ray. To "
        "disable worker killing, set the environment variable `RAY_memory_monitor_refresh_ms` to zero."
    )


def raylet_oom_line(node_id: str, ip: str, raylet_pid: int) -> str:
    """The raylet's periodic report as a driver receives it: Ray prefixes the raylet's error lines with a
    yellow `(raylet)` and keeps the raylet's glog stamp
    (comma before the milliseconds, level, pid, thread)."""
    now = datetime.now()
    stamp = f"{now.strftime('%Y-%m-%d %H:%M:%S')},{now.microsecond // 1000:03d}"
    return (
        f"\x1b[33m(raylet)\x1b[0m [{stamp} E {raylet_pid} {raylet_pid}] (raylet) node_manager.cc:3280: 1 "
        "Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other "
        f"reasons at node (ID: {node_id}, IP: {ip}) over the last time period. To see more information "
        f"about the Workers killed on this node, use `ray logs raylet.out -ip {ip}`"
    )
