"""The simulated miles trainer: argv handling, miles' line formats, and real runs on the Ray cluster."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from runhelp import job_reaches
from waiting import until

from backend.demo.simtrainer import SIM_LABEL, SIM_TRAIN_SCRIPT, is_simulated, metrics
from backend.demo.simtrainer.args import parse
from backend.demo.simtrainer.driver import should_run_periodic_action
from backend.plan.spec import build_spec
from backend.plan.submission import build_submission
from backend.signals.metrics import record_from_event

# miles' metric line, exactly as its logging prints it (optional Ray actor prefix, then its bracket).
MILES_LINE = re.compile(
    r"^(?:\((?P<actor>[\w.]+) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)]+))?\) )?\[(?P<ts>\d{4}-\d\d-\d\d "
    r"\d\d:\d\d:\d\d\.\d{3}) (?P<proc>[^\]]+)\] (?P<file>[^:\s]+):(?P<lineno>\d+) - "
    r"(?P<kind>(?:critic-)?step|perf|rollout|eval|multi_turn) (?P<n>\d+): (?P<payload>\{.*\})$"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
REPEATED = re.compile(r" \[repeated \d+x across cluster\]$")


# the newest miles' actor names (the simulator's default `--sim-log-format newest`)
TRAIN, ROLLOUT = "MegatronTrainRayActorWithConcurrencyGroups", "RolloutExecutor"


def _clean(line: str) -> str:
    return REPEATED.sub("", ANSI.sub("", line))


# ------------------------------------------------------------------ unit
def test_parse_takes_what_it_needs_and_ignores_the_rest():
    a = parse(
        [
            "--num-rollout",
            "7",
            "--moe-router-topk",
            "22",
            "--colocate",
            "--actor-num-nodes",
            "16",
            "--actor-num-gpus-per-node",
            "8",
            "--pipeline-model-parallel-size",
            "4",
            "--rollout-batch-size",
            "32",
            "--n-samples-per-prompt",
            "8",
            "--global-batch-size",
            "128",
            "--save-interval",
            "50",
            "--eval-prompt-data",
            "aime",
            "/d/aime.jsonl",
            "--sim-step-seconds",
            "0.1",
            "--sim-forever",
        ]
    )
    assert (a.num_rollout, a.save_interval, a.eval_name, a.step_seconds, a.forever) == (
        7,
        50,
        "aime",
        0.1,
        True,
    )
    assert a.steps_per_rollout == 2  # 32*8/128, like the Nemotron recipe
    assert (
        a.metric_rank == 96
    )  # first rank of the last PP stage of 128 GPUs, pp=4 (the rank miles logs train metrics from)
    assert parse([]).metric_rank == 0


def test_metric_reprs_match_miles():
    step = metrics.train_step(4, True, 1e-6, nan=True)
    text = f"step 4: {step}"
    assert "'train/loss': nan" in text and "'train/step': 4}" in text
    assert step["train/ppo_kl"] == 0.0 and step["train/pg_clipfrac"] == 0.0  # first step of a rollout
    perf = metrics.rollout_perf(3, 16, 8, 4, 256, 1.5, passrate=True)
    assert "'passrate/pass@1': np.float64(" in str(perf) and "'passrate/pass@4': np.float64(" in str(perf)
    assert isinstance(perf["rollout/response_len/max"], int)
    assert list(perf)[:2] == ["rollout/response_len/mean", "rollout/response_len/median"]
    assert metrics.rollout_batch(5) == metrics.rollout_batch(5)  # deterministic across processes
    assert should_run_periodic_action(1, 2, 10) and not should_run_periodic_action(0, 2, 10)
    assert should_run_periodic_action(9, 4, 10) and not should_run_periodic_action(3, None, 10)


def test_outside_a_ray_job_it_refuses_in_one_labelled_line():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run(
        [sys.executable, "-m", "backend.demo.simtrainer", "--num-rollout", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert SIM_LABEL in out.stderr.splitlines()[0] and "RAY_ADDRESS is not set" in out.stderr


def test_is_simulated():
    assert (
        is_simulated(SIM_TRAIN_SCRIPT) and not is_simulated("/root/miles/train.py") and not is_simulated(None)
    )


# ------------------------------------------------------------------ real cluster
def _spec_overrides(tmp_path: Path, *extra: str) -> list[str]:
    return [
        f"paths.train_script={SIM_TRAIN_SCRIPT}",
        f"paths.output_dir={tmp_path}",
        "batch.num_rollout=3",
        "checkpoint.save_interval=2",
        "eval.enabled=true",
        "eval.interval=2",
        *extra,
    ]


@pytest.mark.ray
async def test_sim_run_looks_like_miles_from_outside(ray_client, tmp_path):
    spec = build_spec(
        "nemotron-3-ultra-550b-a55b-4layer",
        _spec_overrides(
            tmp_path,
            "cluster.nodes=2",
            "run.extra_args=--sim-step-seconds 0.3 --log-passrate --sim-nan-at-step 5",
        ),
    )
    sub = build_submission(spec, nvlink=False, with_shim=False)
    assert is_simulated(sub.metadata.get("train_script"))
    sid = await ray_client.submit(sub.to_ray_payload())
    lines = [line async for line in ray_client.follow_log(sid)]
    job = await ray_client.get_job(sid)
    assert job.status == "SUCCEEDED", job.message

    clean = [_clean(x) for x in lines]
    trainer = [x for x in clean if "train.py:24 - " in x]
    assert trainer and SIM_LABEL in trainer[0]  # its first line says it is a simulation
    parsed = [m for m in map(MILES_LINE.match, clean) if m]
    kinds = Counter((m["kind"], m["actor"], m["file"]) for m in parsed)
    # 2 nodes -> 2 train actors; 32*8/128 = 2 steps per
    # rollout; each step printed twice (log_utils and model.py)
    steps = Counter(int(m["n"]) for m in parsed if m["kind"] == "step")
    assert steps == {n: 2 for n in range(6)}
    assert kinds[("step", TRAIN, "log_utils.py")] == 6
    assert kinds[("step", TRAIN, "model.py")] == 6
    assert kinds[("rollout", TRAIN, "log_utils.py")] == 3
    assert kinds[("perf", ROLLOUT, "metrics.py")] == 3  # rollout-side perf
    assert kinds[("perf", TRAIN, "train_metric_utils.py")] == 3  # train-side perf
    assert {int(m["n"]) for m in parsed if m["kind"] == "eval"} == {0, 1, 2}
    assert all(m["proc"] == "actor_cell0_rank0" for m in parsed if m["actor"] == TRAIN)
    assert any("np.float64(" in m["payload"] for m in parsed if m["file"] == "metrics.py")
    assert len({m["pid"] for m in parsed if m["actor"] == TRAIN}) == 1
    train_pids = {m[1] for x in clean if x.startswith(f"({TRAIN} ") and (m := re.search(r"pid=(\d+)", x))}
    assert len(train_pids) == 2  # one train actor per node

    last_step = [m["payload"] for m in parsed if m["kind"] == "step" and m["n"] == "5"]
    assert "'train/loss': nan" in last_step[0]  # divergence prints bare nan, like miles

    # --dump-details: miles' structured MetricEvents, read with the console's own parser
    events_dir = Path(sub.argv[sub.argv.index("--dump-details") + 1]) / "events"
    assert sorted(p.name for p in events_dir.iterdir()) == [
        "actor_cell0_rank0.jsonl",
        "rollout_executor.jsonl",
    ]
    actor = [json.loads(x) for x in (events_dir / "actor_cell0_rank0.jsonl").read_text().splitlines()]
    assert [e["metrics"]["train/step"] for e in actor if "train/step" in e["metrics"]] == list(range(6))
    assert actor[-2]["metrics"]["train/loss"] is None  # NaN is written as null
    records = [record_from_event(e) for e in actor]
    assert Counter(r.kind for r in records if r) == {"step": 6, "rollout": 3, "perf-train": 3}
    manager = [json.loads(x) for x in (events_dir / "rollout_executor.jsonl").read_text().splitlines()]
    assert sum("eval/step" in e["metrics"] for e in manager) == 3
    assert all(e["source"] == {"component": "rollout_executor"} for e in manager)

    ckpt = Path(sub.argv[sub.argv.index("--save") + 1])
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "iter_0000002",
        "iter_0000003",
        "latest_checkpointed_iteration.txt",
    ]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "3\n"
    assert SIM_LABEL in (ckpt / "iter_0000002" / "SIMULATED").read_text()
    assert any(f"successfully saved checkpoint from iteration       2 to {ckpt}" in x for x in clean)


@pytest.mark.ray
async def test_sim_failure_reaches_ray_as_failed(ray_client, tmp_path):
    spec = build_spec(
        "nemotron-3-ultra-550b-a55b-4layer",
        _spec_overrides(tmp_path, "run.extra_args=--sim-step-seconds 0.2 --sim-fail-at-rollout 1"),
    )
    sub = build_submission(spec, nvlink=False, with_shim=False)
    sid = await ray_client.submit(sub.to_ray_payload())
    job = await job_reaches(ray_client, sid, timeout=120)
    assert job.status == "FAILED" and job.error_type == "JOB_ENTRYPOINT_COMMAND_ERROR"
    assert "simulated failure at rollout 1" in (job.message or "")
    assert job.driver_exit_code == 1


@pytest.mark.ray
async def test_sim_holds_fake_gpus_and_can_leak_a_holder(ray_cluster, ray_client):
    """Train actors show up as GPU memory holders in Ray's real telemetry; a leaked holder
    outlives the job (what `cleanup` must find) until it is killed by PID."""
    sid = f"leak-{uuid.uuid4().hex[:8]}"
    argv = [
        "python3",
        SIM_TRAIN_SCRIPT,
        "--actor-num-nodes",
        "1",
        "--num-rollout",
        "1000",
        "--sim-step-seconds",
        "0.5",
        "--sim-leak-gpu-process",
        "--sim-hold-gpu-mib",
        "40000",
    ]
    await ray_client.submit({"entrypoint": shlex.join(argv), "submission_id": sid})
    leaked = actor = None
    async for line in ray_client.follow_log(sid):
        if m := re.search(r"MegatronTrainRayActor\w* pid=(\d+).*leaked GPU holder pid=(\d+)", line):
            actor, leaked = int(m[1]), int(m[2])
            break
    assert leaked and actor
    mine = {actor, leaked}  # other tests' runs may hold GPUs on the shared cluster too

    async def holders() -> dict[tuple[str, int, int], int]:
        """(node id, GPU index, pid) -> MiB of this job's processes, from Ray's real node summary."""
        summary = await ray_client.nodes_summary()
        return {
            (s["raylet"]["nodeId"], g["index"], p["pid"]): p["gpuMemoryUsage"]
            for s in summary["summary"]
            for g in s.get("gpus", ())
            for p in g["processesPids"]
            if p["pid"] in mine
        }

    async def all_held() -> dict:
        seen = await holders()
        return seen if len(seen) >= 9 else {}  # 8 GPUs held by the actor + the leaked holder

    seen = await until(None, all_held, "9 GPU holders in Ray's telemetry", 30, interval=1.0)
    assert sorted(seen.values()) == [10000] + [40000] * 8
    assert {pid for (_n, _i, pid), mib in seen.items() if mib == 10000} == {leaked}
    assert len({node for (node, _i, _p) in seen}) == 1  # the leak sits on the actor's node
    await ray_client.stop_job(sid)
    await job_reaches(ray_client, sid, timeout=120)

    async def only_leak() -> bool:  # the actor died with the job; the leaked holder stays
        return {pid for (_n, _i, pid) in await holders()} == {leaked}

    await until(None, only_leak, "only the leaked holder left in telemetry", 30, interval=1.0)
    os.kill(leaked, signal.SIGKILL)  # by PID, as cleanup does

    async def none_held() -> bool:
        return not await holders()

    await until(None, none_held, "no holder left in telemetry", 30, interval=1.0)
