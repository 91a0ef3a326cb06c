"""The flight recorder read live: the node script (backend/cluster/fr_job.py, as it travels to a node)
against 4 real torch gloo ranks running torch's worker debug server, one skipping a collective while the
other 3 hang in it; its answers through the console's reader (backend/cluster/fr_collect.py) and the
analyzer name the skipping rank, the op, the sequence and its live stack."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fr_hang import ranks_waiting

from backend.cluster import fr_job
from backend.cluster.flight_recorder import analyse, traceback_frames
from backend.cluster.fr_collect import _trace, actor_of
from backend.cluster.node_job import script_source
from backend.json_fields import Fields
from backend.signals.failures import Diagnosis

REPO = Path(__file__).resolve().parents[2]
RANKS = REPO / "tests" / "support" / "fr_hang.py"
JOB_ID = "0a00fe31"
SKIP = 3
pytestmark = pytest.mark.timeout(240)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def hung_world() -> Iterator[tuple[Path, list[subprocess.Popen[str]]]]:
    """4 gloo ranks (bounded: 90 s), rank 3 away; yields once ranks 0-2 wait in the 4th all_reduce."""
    folder = Path(f"/tmp/fr-{os.getpid()}-{time.monotonic_ns()}")  # a unix socket path stays short
    env = {**os.environ, "RAY_JOB_ID": JOB_ID, "TORCH_FR_DUMP_TEMP_FILE": f"{folder}/rank_"}
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANKS), str(r), "4", str(port), str(folder), str(SKIP), "90"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for r in range(4)
    ]
    try:
        deadline = time.monotonic() + 90
        while not ranks_waiting(folder, range(3), 4):
            assert time.monotonic() < deadline, "the ranks never reached the hung step"
            assert all(p.poll() is None for p in procs), "a rank exited early"
            time.sleep(0.3)
        yield folder, procs
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)
        for sock in folder.glob("*.sock"):
            sock.unlink()
        if folder.exists():
            folder.rmdir()


@pytest.mark.slow  # 4 real torch gloo ranks (~6 CPU-s): the full suite runs it, --fast does not
def test_the_node_script_reads_every_rank_and_the_verdict_names_the_skipper(hung_world) -> None:
    _, procs = hung_world
    source = script_source(REPO / "backend" / "cluster" / "fr_job.py")
    assert "from backend" not in source  # a node has no console
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            source,
            "--fr",
            "--job-id",
            JOB_ID,
            "--submission-id",
            "none",
            "--per-process-s",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seconds = time.monotonic() - started
    events = [
        Fields(json.loads(ln[len(fr_job.MARK) :]))
        for ln in done.stdout.splitlines()
        if ln.startswith(fr_job.MARK)
    ]
    summary = events[-1]
    assert summary.integer("pid") == -1 and summary.integer("processes") == 4
    assert summary.integer("without_server") == 0
    answers = {e.integer("pid"): e for e in events[:-1]}
    assert sorted(answers) == sorted(p.pid for p in procs)
    traces = [_trace(e, "n1", {}) for e in answers.values()]
    assert (
        sorted(t.rank or 0 for t in traces) == [0, 1, 2, 3]
        and None not in {t.rank for t in traces}
        and not any(t.error for t in traces)
    )
    analysis = analyse(
        [t.dump for t in traces if t.dump],
        live_stacks={t.rank: t.stack for t in traces if t.rank is not None},
    )
    v = analysis.verdict
    assert v is not None and v.seq == 4 and v.op == "all_reduce" and v.ranks == (0, 1, 2, 3)
    assert [(c.rank, c.kind) for c in v.culprits] == [(SKIP, "missing")]
    assert v.culprits[0].stack[0].startswith("skip_the_collective (fr_hang.py:")
    labels = {t.rank: t.label for t in traces if t.rank is not None}
    assert v.line(labels).startswith(f"rank 3 (node n1, pid {procs[3].pid}) never entered all_reduce #4")
    waiting = next(t for t in traces if t.rank == 0)
    assert waiting.stack[0].startswith("step_all_reduce (fr_hang.py:")
    assert seconds < 30, seconds


@pytest.mark.slow  # 4 real torch gloo ranks (~6 CPU-s): the full suite runs it, --fast does not
def test_a_socket_elsewhere_or_a_handler_error_is_never_taken_for_a_trace(hung_world) -> None:
    folder, procs = hung_world
    assert fr_job.servers(procs[0].pid) == [str(folder / "worker_rank_0.sock")]
    assert fr_job.servers(os.getpid()) == []  # this process: no TORCH_FR_DUMP_TEMP_FILE, no server
    with pytest.raises(OSError, match="404"):
        fr_job.ask(str(folder / "worker_rank_0.sock"), "no_such_handler", 5)
    out = fr_job.read_one(procs[1].pid, "ray::HangRank.run", str(folder / "nope_rank_1.sock"), 2)
    assert out["rank"] == 1 and "no flight-recorder trace" in str(out["error"])


def test_traceback_frames_pick_the_waiting_thread_else_the_main_one() -> None:
    text = (
        "Current thread 0x00007f (most recent call first):\n  <no Python frame>\n\n"
        "Thread 0x00007e (most recent call first):\n"
        '  File "/x/threading.py", line 320 in wait\n\n'
        "Thread 0x00007d (most recent call first):\n"
        '  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3245 in all_reduce\n'
        '  File "/job/train.py", line 12 in step\n'
        '  File "/job/train.py", line 40 in main\n'
        '  File "/venv/site-packages/ray/util/tracing/tracing_helper.py", line 487 in _resume_span\n'
        '  File "/venv/site-packages/ray/_private/worker.py", line 900 in main_loop\n'
    )
    assert traceback_frames(text) == ("step (train.py:12)", "main (train.py:40)")
    main_only = text.replace("distributed_c10d.py", "other.py").replace("/torch/", "/t/")
    assert traceback_frames(main_only)[0] == "all_reduce (other.py:3245)"
    assert traceback_frames("garbage") == ()
    assert actor_of("ray::MegatronTrainRayActor.train --x") == "MegatronTrainRayActor"
    assert actor_of("python3 train.py") == ""


NCCL_LINE = (
    "(MegatronTrainRayActor pid=4101) [rank1]:[E1201 10:00:05.123 ProcessGroupNCCL.cpp:616] [Rank 1] "
    "Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=16, NumelOut=16, "
    "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n"
)


def _diagnosis(text: str) -> Diagnosis | None:
    from backend.signals.monitor import RunMonitor

    monitor = RunMonitor()
    monitor.on_job_status("FAILED")
    monitor.feed_text(text)
    return monitor.diagnosis()


def test_an_nccl_timeout_cause_names_the_rank_the_dumps_convict(tmp_path: Path) -> None:
    import shutil

    from backend.cluster.dashboard import JobInfo
    from backend.cluster.fr_collect import with_collective_cause

    folder = tmp_path / "run" / "flight_recorder"
    folder.mkdir(parents=True)
    for dump in (REPO / "tests" / "data" / "flight_recorder" / "skip").glob("rank*"):
        shutil.copy(dump, folder / f"rank_{dump.name[4:]}")
    env = {"env_vars": {"TORCH_FR_DUMP_TEMP_FILE": f"{folder}/rank_"}}
    job = JobInfo(submission_id="s", status="FAILED", runtime_env=env)
    found = _diagnosis(NCCL_LINE)
    assert found is not None and found.cause.id == "nccl-timeout"
    told = with_collective_cause(found, job)
    assert told is not None and told.cause.message.startswith(found.cause.message + "; the flight recorder: ")
    assert "rank 3 never entered all_reduce #4 of group 0 (default_pg) {0..3}" in told.cause.message
    # no dumps readable here, another cause, no prefix: the diagnosis as it was
    elsewhere = JobInfo(
        submission_id="s",
        status="FAILED",
        runtime_env={"env_vars": {"TORCH_FR_DUMP_TEMP_FILE": "/nonexistent/fr/rank_"}},
    )
    assert with_collective_cause(found, elsewhere) is found
    assert with_collective_cause(found, JobInfo(submission_id="s", status="FAILED")) is found
    other = _diagnosis(
        "(MegatronTrainRayActor pid=4101) torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB\n"
    )
    assert other is not None and other.cause.id == "cuda-oom"
    assert with_collective_cause(other, job) is other
