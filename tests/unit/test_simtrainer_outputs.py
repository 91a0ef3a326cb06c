"""The simulated trainer's miles outputs that need no cluster: the bare (no Ray) run end to end in a
subprocess, its OOM death, miles' dashboard file layout and record shapes from the fake NVML."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backend.demo.simtrainer.actors import truncated
from backend.demo.simtrainer.dashboard import DashboardStore, GpuSampler, hour_key
from backend.demo.simtrainer.oom import OutOfMemoryError, oom_message
from backend.signals.metrics import parse_metric_text


def _bare(tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "backend.demo.simtrainer",
            "--sim-log-format",
            "bare",
            "--num-rollout",
            "2",
            "--sim-step-seconds",
            "0.05",
            "--dump-details",
            str(tmp / "dump"),
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bare_run_needs_no_ray_and_prints_bare_lines(tmp_path):
    out = _bare(tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stderr.splitlines()
    metric = [x for x in lines if re.match(r"^(step|perf|rollout) \d+: \{", x)]
    assert len(metric) == 2 * 2 + 2 + 2 * 2  # 8*2/16 = 1 step per rollout, printed twice; rollout; both perfs
    assert not any(x.startswith(("(", "[")) for x in lines)
    assert sorted(p.name for p in (tmp_path / "dump" / "events").iterdir()) == [
        "actor_cell0_rank0.jsonl",
        "rollout_manager.jsonl",
    ]


def test_bare_oom_prints_torchs_error_and_fails(tmp_path):
    out = _bare(tmp_path, "--sim-oom-at-rollout", "1", "--sim-oom-gpu", "5")
    assert out.returncode == 1
    tail = out.stderr.splitlines()
    assert "[torch_memory_saver.cpp] TorchMemorySaver::malloc return OOM size=2254857830 device=5" in tail
    assert tail[-1].startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB. GPU 5 has a "
        "total capacity of 139.80 GiB of which 1.02 GiB is free. Process "
    )
    assert "Traceback (most recent call last):" in tail


def test_oom_error_pickles_and_reads_like_torchs():
    import pickle

    err = OutOfMemoryError(oom_message(3, 4101, int(2.1 * 2**30), int(1.02 * 2**30)))
    assert f"{type(err).__module__}.{type(err).__qualname__}" == "torch.OutOfMemoryError"
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is OutOfMemoryError and str(again) == str(err)
    assert "Process 4101 has 138.78 GiB memory in use." in str(err)


def test_truncated_metric_lines_are_cut_inside_the_dict_and_unreadable():
    line = (
        "[2026-03-02 10:00:05.000 actor_cell0_rank0] log_utils.py:542 "
        "- step 6: {'train/loss': 0.012, 'train/ppo_kl': -3.1e-05}"
    )
    cut = truncated(line)
    assert line.startswith(cut) and "{" in cut and not cut.endswith("}")
    records, problems = parse_metric_text(cut + "\n")
    # read as far as its complete pairs (marked cut), or unreadable when not one pair is whole
    assert len(records) + len(problems) == 1 and all(r.cut for r in records)


def test_dashboard_store_writes_miles_layout(tmp_path):
    store = DashboardStore(tmp_path / "dashboard")
    store.write_meta("run-a", 1755771500.0, {"rollout_num_gpus": 8})
    t = 1755771599.0  # 10:19:59 UTC; the phases below began an hour earlier
    store.append(
        "gpu_util", {"ts": t, "node": "10.0.0.1", "gpu": 0, "util": 95, "mem_mb": 61440, "power_w": 612}
    )
    store.append(
        "phases",
        {
            "name": "train",
            "t0": 1755770399.0,
            "t1": t,
            "node": "10.0.0.1",
            "gpus": [0],
            "rank": 0,
            "role": "train",
        },
    )
    store.append(
        "phases",
        {
            "name": "rollout",
            "t0": 1755770399.0,
            "t1": -1.0,
            "node": "10.0.0.1",
            "gpus": [],
            "rank": -1,
            "role": "rollout_manager",
        },
    )
    store.append(
        "metrics",
        {
            "ts": t,
            "step_key": "train/step",
            "step": 0,
            "metrics": {"train/loss": float("nan"), "train/step": 0},
        },
    )
    assert store.flush() == 4 and store.flush() == 0
    root = tmp_path / "dashboard"
    assert json.loads((root / "meta.json").read_text()) == {
        "run_name": "run-a",
        "start_ts": 1755771500.0,
        "args": {"rollout_num_gpus": 8},
        "schema_version": 1,
    }
    assert (root / "meta.json").read_text().startswith('{\n "run_name"')  # indent=1, as miles writes it
    end, start = hour_key(t), hour_key(1755770399.0)
    assert end != start  # a closed phase is filed by its end hour, an open one by its start hour
    assert [json.loads(x)["name"] for x in (root / "phases" / f"{end}.jsonl").read_text().splitlines()] == [
        "train"
    ]
    assert [json.loads(x)["t1"] for x in (root / "phases" / f"{start}.jsonl").read_text().splitlines()] == [
        -1.0
    ]
    assert (root / "metrics.jsonl").read_text() == (
        '{"ts":1755771599.0,"step_key":"train/step","step":0,"metrics":{"train/loss":NaN,"train/step":0}}\n'
    )
    assert json.loads((root / "lane_catalog.json").read_text()) == {
        "version": 1,
        "lanes": {"10.0.0.1:0": {"ranks": [0], "engine_addrs": [], "roles": ["train"]}},
    }


def test_gpu_sampler_reads_the_same_fake_nvml_as_rays_reporter(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_GPU_DIR", str(tmp_path))
    monkeypatch.setenv("FAKE_GPU_COUNT", "2")
    (tmp_path / "node-a").mkdir()
    (tmp_path / "node-a" / f"gpu1-{os.getpid()}.json").write_text(json.dumps({"mem": 40000, "util": 97}))
    sampler = GpuSampler.__new__(GpuSampler)  # no thread: one sample by hand
    sampler.node, sampler.node_id, sampler.interval = "10.0.0.1", "node-a", 1.0
    sampler._buf = {"gpu_util": [], "gpu_processes": []}
    import threading

    sampler._lock = threading.Lock()
    sampler.sample_once(1000.0, processes=True)
    assert sampler._buf["gpu_util"] == [
        {"ts": 1000.0, "node": "10.0.0.1", "gpu": 0, "util": 0, "mem_mb": 615, "power_w": 90},
        {"ts": 1000.0, "node": "10.0.0.1", "gpu": 1, "util": 97, "mem_mb": 40615, "power_w": 672},
    ]
    [proc] = sampler._buf["gpu_processes"]
    assert (proc["gpu"], proc["pid"], proc["mem_mb"]) == (1, os.getpid(), 40000) and proc["name"]


def test_sim_fail_flags_and_their_old_spellings():
    from backend.demo.simtrainer.args import parse

    assert (
        parse(["--sim-oom-at-rollout", "2"]).fail,
        parse(["--sim-oom-at-rollout", "2"]).oom_at_rollout,
    ) == ("train-oom", 2)
    assert parse(["--sim-fail-at-rollout", "1"]).fail == "error"
    nccl = parse(["--sim-fail", "nccl-timeout", "--actor-num-nodes", "2"])
    assert (nccl.fail_at_rollout, nccl.culprit_rank, nccl.oom_at_rollout) == (0, 15, None)
    assert parse([]).fail is None and not parse([]).fails_at("error", 0)


def _refused(capsys, *extra: str) -> tuple[object, str]:
    """The trainer's argument parser in this process on `_bare`'s arguments: (exit code, stderr)."""
    from backend.demo.simtrainer.args import parse

    with pytest.raises(SystemExit) as exit_:
        parse(["--sim-log-format", "bare", "--num-rollout", "2", "--sim-step-seconds", "0.05", *extra])
    return exit_.value.code, capsys.readouterr().err


def test_sim_fail_refuses_what_cannot_be_simulated(tmp_path, capsys):
    """One refusal as the trainer's process exits with it, the others from its parser in this process."""
    host = _bare(tmp_path, "--sim-fail", "host-oom")
    assert host.returncode == 2 and host.stderr.splitlines()[-1].endswith(
        "--sim-fail host-oom needs Ray: not with --sim-log-format bare"
    )
    code, err = _refused(capsys, "--sim-fail", "nccl-timeout", "--sim-fail-rank", "8")
    assert code == 2 and "--sim-fail-rank must be a rank of the 8-GPU training world" in err
    code, err = _refused(capsys, "--sim-fail", "engine-start", "--sim-oom-at-rollout", "1")
    assert code == 2 and "give one of them" in err


def test_bare_engine_start_prints_sglangs_scheduler_death_before_any_metric(tmp_path):
    out = _bare(tmp_path, "--sim-fail", "engine-start")
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    first = next(
        i
        for i, x in enumerate(lines)
        if "Scheduler hit an exception: Traceback (most recent call last):" in x
    )
    assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Scheduler hit an exception", lines[first])
    tail = lines[first:]
    assert tail.index(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    ) < next(
        i
        for i, x in enumerate(tail)
        if x.endswith("] Received sigquit from a child process. It usually means the child failed.")
    )
    assert lines[-1] == "RuntimeError: Server process terminated unexpectedly."
    assert not any(re.match(r"^(step|rollout|perf) \d+: \{", x) for x in lines)


def test_bare_nccl_timeout_every_rank_but_the_culprit_times_out_then_aborts(tmp_path):
    out = _bare(tmp_path, "--sim-fail", "nccl-timeout", "--sim-fail-rank", "5", "--sim-nccl-timeout-s", "0.2")
    assert out.returncode == -6  # SIGABRT, as torch's watchdog takes the process down
    caught = [
        m
        for m in map(
            re.compile(
                r"^\[rank(\d+)\]:\[E\d{3,4} \d\d:\d\d:\d\d\.\d{9} ProcessGroupNCCL\.cpp:616\] \[Rank "
                r"(\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=1580, "
                r"OpType=ALLREDUCE, NumelIn=\d+, NumelOut=\d+, Timeout\(ms\)=200\) "
                r"ran for (\d+) milliseconds before timing out\.$"
            ).match,
            out.stderr.splitlines(),
        )
        if m
    ]
    assert [int(m[1]) for m in caught] == [0, 1, 2, 3, 4, 6, 7] and all(m[1] == m[2] for m in caught)
    assert all(int(m[3]) >= 200 for m in caught)
    assert out.stderr.count("To avoid data inconsistency, we are taking the entire process down.") == 7
    assert "last enqueued NCCL work: 1582, last completed NCCL work: 1579." in out.stderr
    assert "terminate called after throwing an instance of 'c10::DistBackendError'" in out.stderr
