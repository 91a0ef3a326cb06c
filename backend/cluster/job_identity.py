"""Which Ray jobs are training runs, and which one is "the latest run".

A job is ours when the console submitted it (`metadata["ultra_console"]`, set by
backend.plan.submission). A job is miles' when its entrypoint is `python3 .../train.py` carrying miles'
flags: miles' own launcher (`ray job submit -- python3 <repo>/train.py ...`, miles-run-output.md
§1.2) sets no metadata, so the entrypoint is the only mark it leaves. Cleanup jobs the console
submits are marked too and never count as runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Literal

from backend.cluster.dashboard import JobInfo

JobKind = Literal["ours", "miles", "cleanup", "probe", "watch", "claim", "other"]
OURS_KEY = "ultra_console"
CLEANUP_KEY = "ultra_console_cleanup"
PROBE_KEY = "ultra_console_probe"
WATCH_KEY = "ultra_console_watch"  # a run's watcher (backend.cluster.watcher): the value is the run's id
CLAIM_KEY = (
    "ultra_console_claim"  # the launch claim (backend.cluster.launch_claim): the value is the run's id
)
CONSOLE_TOOLS: frozenset[JobKind] = frozenset({"cleanup", "probe", "watch", "claim"})
TRAIN_SCRIPTS = ("train.py", "train_async.py")
# Flags only miles' train.py takes; two of them make a python3 train.py entrypoint a miles run.
MILES_FLAGS = frozenset(
    {
        "--megatron-to-hf-mode",
        "--hf-checkpoint",
        "--rollout-num-gpus-per-engine",
        "--actor-num-nodes",
        "--actor-num-gpus-per-node",
        "--rollout-num-gpus",
        "--prompt-data",
        "--advantage-estimator",
        "--sglang-mem-fraction-static",
        "--colocate",
        "--dump-details",
        "--rm-type",
        "--n-samples-per-prompt",
    }
)


def _tokens(entrypoint: str) -> list[str]:
    try:
        return shlex.split(entrypoint)
    except ValueError:
        return entrypoint.split()


def is_miles_entrypoint(entrypoint: str) -> bool:
    tokens = _tokens(entrypoint)
    for i, tok in enumerate(tokens[:-1]):
        name = tok.rsplit("/", 1)[-1]
        if name.startswith("python") and tokens[i + 1].rsplit("/", 1)[-1] in TRAIN_SCRIPTS:
            flags = {t.split("=", 1)[0] for t in tokens[i + 2 :] if t.startswith("--")}
            return len(flags & MILES_FLAGS) >= 2
    return False


def job_kind(job: JobInfo) -> JobKind:
    meta = job.meta
    if meta.has(CLEANUP_KEY):
        return "cleanup"
    if meta.has(PROBE_KEY):
        return "probe"
    if meta.has(WATCH_KEY):
        return "watch"
    if meta.has(CLAIM_KEY):
        return "claim"
    if meta.has(OURS_KEY):
        return "ours"
    if is_miles_entrypoint(job.entrypoint or ""):
        return "miles"
    return "other"


def is_console_tool(job: JobInfo) -> bool:
    """One of the console's own helper jobs: it holds no GPU memory and is never a reason to wait."""
    return job_kind(job) in CONSOLE_TOOLS


def is_run(job: JobInfo) -> bool:
    return job.type != "DRIVER" and job_kind(job) in ("ours", "miles")


def runs(jobs: Iterable[JobInfo]) -> list[JobInfo]:
    """Training runs, newest first (by start time; a job without one sorts first: it was just submitted)."""
    found = [j for j in jobs if is_run(j)]
    return sorted(
        found, key=lambda j: j.start_time if j.start_time is not None else float("inf"), reverse=True
    )


def latest_run(jobs: Iterable[JobInfo]) -> JobInfo | None:
    found = runs(jobs)
    return found[0] if found else None


def active_runs(jobs: Iterable[JobInfo]) -> list[JobInfo]:
    return [j for j in runs(jobs) if not j.is_terminal]


def run_id_of(job: JobInfo) -> str | None:
    return job.meta.string("run_id")
