"""Preflight rules P1-P7 and job identity, pure: synthetic
snapshots, Ray-shaped job records, fake filesystem."""

from __future__ import annotations

from pathlib import Path

from backend.cluster.dashboard import JobInfo
from backend.cluster.job_identity import active_runs, is_miles_entrypoint, job_kind, latest_run
from backend.cluster.preflight import ClusterFacts, check_cluster
from backend.cluster.telemetry import ClusterSnapshot, GpuProcess, GpuSnapshot, NodeSnapshot
from backend.plan.spec import build_spec

MILES_ENTRY = (
    "python3 /root/miles/train.py --hf-checkpoint /root/models/x --megatron-to-hf-mode bridge "
    "--actor-num-nodes 1 --rollout-num-gpus-per-engine 8"
)


def node(
    i: int,
    *,
    used: float | None = 0.0,
    alive: bool = True,
    procs: list[GpuProcess] | None = None,
    total: float = 8.0,
) -> NodeSnapshot:
    gpus = [
        GpuSnapshot(
            index=g,
            utilization_pct=0.0,
            mem_used_mb=615,
            mem_total_mb=143771,
            processes=list(procs or []) if g == 0 else [],
        )
        for g in range(8)
    ]
    return NodeSnapshot(
        node_id=f"{i:02d}" + "ab" * 27,
        name=f"n{i}",
        alive=alive,
        state="ALIVE" if alive else "DEAD",
        death_reason=None if alive else "health check failed",
        gpus=gpus if alive else None,
        logical_gpus_total=total,
        logical_gpus_used=used,
        is_head=i == 0,
    )


def job(sid: str, status: str, *, ours: bool = True, start: int = 1, entry: str = "python3 x.py") -> JobInfo:
    return JobInfo(
        submission_id=sid,
        status=status,
        entrypoint=MILES_ENTRY if not ours else entry,
        metadata={"ultra_console": "1", "run_id": sid} if ours else {},
        start_time=start,
        type="SUBMISSION",
    )


def spec(nodes: int = 1):
    return build_spec("nemotron-3-ultra-550b-a55b-4layer", [f"cluster.nodes={nodes}"] if nodes != 1 else [])


def facts(nodes: list[NodeSnapshot], jobs: list[JobInfo] | None = None, version: str | None = "2.60.0"):
    return ClusterFacts(ClusterSnapshot(nodes=nodes, taken_at=1.0), jobs or [], version)


def rules(findings, severity: str | None = None) -> list[str]:
    return sorted(f.rule for f in findings if severity is None or f.severity == severity)


def everything_exists(path: str) -> bool:
    return True


def test_healthy_cluster_has_no_error() -> None:
    out = check_cluster(spec(), facts([node(0), node(1)]), exists=everything_exists)
    assert rules(out, "error") == [] and rules(out, "warning") == []


def test_p1_not_enough_free_nodes_and_dead_node_info() -> None:
    s = build_spec("nemotron-3-ultra-550b-a55b")  # 16 nodes
    out = check_cluster(
        s, facts([node(0), node(1, used=8.0), node(2, alive=False)]), exists=everything_exists
    )
    p1 = [f for f in out if f.rule == "P1"]
    err = next(f for f in p1 if f.severity == "error")
    assert "needs 16 nodes" in err.message and "2 alive node(s)" in err.message and "1 of them" in err.message
    assert "cluster.nodes" in err.fields
    assert any(f.severity == "info" and "health check failed" in f.message for f in p1)


def test_p1_small_nodes_do_not_count() -> None:
    out = check_cluster(spec(), facts([node(0, total=4.0)]), exists=everything_exists)
    assert "P1" in rules(out, "error")


def test_p2_leftover_pids_only_when_no_run_active() -> None:
    nodes = [node(0, procs=[GpuProcess(4242, 50000)]), node(1)]
    out = check_cluster(spec(), facts(nodes), exists=everything_exists)
    (p2,) = [f for f in out if f.rule == "P2"]
    assert p2.severity == "warning" and "pid 4242" in p2.message and "50000 MiB" in p2.message
    busy = check_cluster(spec(), facts(nodes, [job("r1", "RUNNING")]), exists=everything_exists)
    assert "P2" not in rules(busy)


def test_p2_memory_held_without_a_process_list_is_info() -> None:
    held = node(1)
    assert held.gpus is not None
    gpus = [g.model_copy(update={"mem_used_mb": 60000}) if g.index == 2 else g for g in held.gpus]
    snap_nodes = [node(0), held.model_copy(update={"gpus": gpus})]
    (p2,) = [f for f in check_cluster(spec(), facts(snap_nodes), exists=everything_exists) if f.rule == "P2"]
    assert (
        p2.severity == "info"
        and p2.message.startswith("1 GPU(s) on n1")
        and "process list is unavailable" in p2.message
    )


def test_p3_active_run_is_an_error_terminal_is_not() -> None:
    out = check_cluster(
        spec(),
        facts([node(0)], [job("old", "SUCCEEDED"), job("m", "RUNNING", ours=False)]),
        exists=everything_exists,
    )
    (p3,) = [f for f in out if f.rule == "P3"]
    assert p3.severity == "error" and "miles run m" in p3.message and "--force" in p3.fix


def test_p4_p5_p7_paths_checked_on_head() -> None:
    s = build_spec(
        "nemotron-3-ultra-550b-a55b-4layer",
        ["paths.model_dir=/m", "paths.data_dir=/d", "paths.miles_root=/miles"],
    )
    seen: list[str] = []

    def exists(path: str) -> bool:
        seen.append(path)
        return False

    out = check_cluster(s, facts([node(0)]), exists=exists)
    assert rules(out, "error") == ["P4", "P5", "P7"]
    assert f"/m/{s.model.name}" in seen and f"/d/{s.data.prompt_data}" in seen and "/miles/train.py" in seen


def test_p6_ray_version() -> None:
    assert rules(check_cluster(spec(), facts([node(0)], version="2.61.1"), exists=everything_exists)) == [
        "P6"
    ]
    major = check_cluster(spec(), facts([node(0)], version="3.0.0"), exists=everything_exists)
    assert rules(major, "error") == ["P6"]
    assert rules(check_cluster(spec(), facts([node(0)], version="2.60.3"), exists=everything_exists)) == []


def test_job_identity() -> None:
    assert is_miles_entrypoint(MILES_ENTRY)
    assert not is_miles_entrypoint("python3 /srv/other/train.py --epochs 3")
    assert not is_miles_entrypoint("python3 -c 'print(1)'")
    jobs = [
        job("a", "SUCCEEDED", start=10),
        job("b", "FAILED", ours=False, start=30),
        job("c", "RUNNING", start=20),
        JobInfo(submission_id="x", status="RUNNING", entrypoint="sleep 9", start_time=99),
    ]
    assert [job_kind(j) for j in jobs] == ["ours", "miles", "ours", "other"]
    assert (latest := latest_run(jobs)) is not None and latest.id == "b"
    assert [j.id for j in active_runs(jobs)] == ["c"]
    cleanup = JobInfo(
        submission_id="k",
        status="RUNNING",
        metadata={"ultra_console_cleanup": "cleanup"},
        entrypoint="python3 -c ...",
        start_time=100,
    )
    latest = latest_run([*jobs, cleanup])
    assert job_kind(cleanup) == "cleanup" and latest is not None and latest.id == "b"


def test_the_console_gpu_probe_is_no_run_and_no_reason_to_wait() -> None:
    """The console's GPU probe runs for as long as consoles are attached: preflight must still allow a launch
    (no P3), and still say what holds GPU memory (old code: any active non-cleanup job silenced P2)."""
    from backend.cluster.gpu_probe import probe_submission

    payload = probe_submission(
        "00" + "ab" * 27, Path("/tmp/leases"), lease_timeout_s=45, interval_s=1, max_age_s=3600
    )
    probe = JobInfo.model_validate(
        {
            "submission_id": payload["submission_id"],
            "status": "RUNNING",
            "entrypoint": payload["entrypoint"],
            "metadata": payload["metadata"],
            "start_time": 5,
            "type": "SUBMISSION",
        }
    )
    assert job_kind(probe) == "probe" and latest_run([probe]) is None and active_runs([probe]) == []
    assert probe.id.startswith("ultra-console-gpu-probe-")  # visibly the console's in `ray job list`
    nodes = [node(0, procs=[GpuProcess(4242, 50000)]), node(1)]
    out = check_cluster(spec(), facts(nodes, [probe]), exists=everything_exists)
    assert "P3" not in rules(out) and not [f for f in out if f.severity == "error"]
    assert any(f.rule == "P2" and "pid 4242" in f.message for f in out)
