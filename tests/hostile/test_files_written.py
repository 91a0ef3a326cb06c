"""Hostile input, round 2 (issue 36), the files the console writes: the GPU probe's lease and lock, the audit
log. Each is opened through backend/safe_paths.py's rule (O_NOFOLLOW in a directory of the user's own):
a link, a FIFO, a device or another user's directory at the path is refused in one line, never followed."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from pathlib import Path

import pytest

from backend.cluster import gpu_probe_job, watcher_job
from backend.cluster.audit import AuditError, AuditLog
from backend.cluster.dashboard import JobInfo
from backend.cluster.gpu_probe import GpuProbe, default_lease_dir, lease_dir_of
from backend.safe_paths import UnsafePath, private_dir, safe_name


def _probe(home: Path) -> GpuProbe:
    return GpuProbe(None, lease_home=home)  # type: ignore[arg-type]  # no request is made by these steps


def test_a_lease_swapped_for_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"root-only data")
    probe = _probe(tmp_path / "leases")
    lease_dir = default_lease_dir("session_x", tmp_path / "leases")
    probe._take_lease(lease_dir)
    lease = lease_dir / f"{probe.lease_id}.lease"
    assert lease.is_file() and stat.S_IMODE(lease_dir.stat().st_mode) == 0o700
    lease.unlink()
    lease.symlink_to(victim)
    probe._renew()
    assert victim.read_bytes() == b"root-only data"
    assert "symlink" in probe.status and "\n" not in probe.status


def test_a_lease_dir_named_by_the_network_is_never_written(tmp_path: Path) -> None:
    named = tmp_path / "elsewhere" / "made-up"
    job = JobInfo.model_validate({"submission_id": "p", "entrypoint": f"python3 -c x --lease-dir={named}"})
    probe = _probe(tmp_path / "leases")
    probe._take_lease(lease_dir_of(job))  # type: ignore[arg-type]
    assert not (tmp_path / "elsewhere").exists() and probe._lease_path is None
    assert "not this console's own" in probe.status


def test_the_default_lease_dir_is_the_users_own_never_a_shared_tmp_name(tmp_path: Path) -> None:
    assert not str(default_lease_dir("s")).startswith(tempfile.gettempdir() + "/ultra-console-gpu-probe")
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 54321, 54321)  # another user created it first
    with pytest.raises(UnsafePath, match="another user"):
        private_dir(foreign)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafePath, match="others may write"):
        private_dir(shared)


def test_the_probes_lock_never_chmods_a_symlinked_directory(tmp_path: Path) -> None:
    target = tmp_path / "system"
    target.mkdir(mode=0o755)
    link = tmp_path / "leases"
    link.symlink_to(target)
    with pytest.raises(UnsafePath, match="symlink"):
        gpu_probe_job.take_lock(str(link))
    assert stat.S_IMODE(target.stat().st_mode) == 0o755 and not (target / "probe.lock").exists()


def test_a_lease_dated_in_the_future_keeps_no_probe_alive(tmp_path: Path) -> None:
    (tmp_path / "now.lease").write_text("x")
    (tmp_path / "future.lease").write_text("x")
    ahead = time.time() + 3600
    os.utime(tmp_path / "future.lease", (ahead, ahead))
    (tmp_path / "link.lease").symlink_to(tmp_path / "now.lease")
    assert gpu_probe_job.fresh_leases(str(tmp_path), 45.0) == ["now"]


class _Cluster:
    """The dashboard calls `_start` makes, answered in memory; counts submissions."""

    def __init__(self) -> None:
        self.submitted: list[dict[str, object]] = []

    async def nodes(self) -> list[dict[str, object]]:
        return [{"node_id": "h" * 56, "is_head_node": True, "state": "ALIVE"}]

    async def version(self) -> dict[str, str]:
        return {"session_name": "session_1"}

    async def list_jobs(self) -> list[JobInfo]:
        return []

    async def submit(self, payload: dict[str, object]) -> str:
        self.submitted.append(payload)
        return str(payload["submission_id"])

    async def get_job(self, sid: str) -> JobInfo:
        return JobInfo.model_validate({"submission_id": sid, "status": "FAILED"})


async def test_an_unwritable_lease_dir_submits_no_probe_and_restarts_are_bounded(tmp_path: Path) -> None:
    cluster = _Cluster()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the lease root should be")
    probe = GpuProbe(cluster, lease_home=blocked)  # type: ignore[arg-type]
    for _ in range(5):
        assert await probe._start() is None
    assert cluster.submitted == [] and "cannot renew" in probe.status
    probe = GpuProbe(cluster, lease_home=tmp_path / "ok")  # type: ignore[arg-type]
    for _ in range(20):
        await probe._start()
        (default_lease_dir("session_1", tmp_path / "ok") / "starting").unlink(missing_ok=True)
    assert len(cluster.submitted) == 4 and "starting no more" in probe.status


def test_the_watchers_lock_and_files_never_follow_a_link(tmp_path: Path) -> None:
    """The watcher's lock, status and notified list go through safe_paths' rule like every other file."""
    run_dir = tmp_path / "run"
    first = watcher_job.take_lock(run_dir)
    assert first is not None and watcher_job.take_lock(run_dir) is None  # one watcher per run
    first.close()
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    target = tmp_path / "precious"
    target.write_text("keep")
    (run_dir / watcher_job.LOCK).unlink()
    (run_dir / watcher_job.LOCK).symlink_to(target)
    with pytest.raises(UnsafePath, match="symlink"):
        watcher_job.take_lock(run_dir)
    assert target.read_text() == "keep"


def test_a_fifo_or_a_dev_zero_link_at_the_audit_path_is_one_line_never_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "audit.jsonl")
    started = time.monotonic()
    with pytest.raises(AuditError, match="not a regular file"):
        AuditLog(tmp_path).read()
    with pytest.raises(AuditError, match="not a regular file"):
        AuditLog(tmp_path).record("launch", job="j", result="submitted")
    other = tmp_path / "zero"
    other.mkdir(mode=0o700)
    (other / "audit.jsonl").symlink_to("/dev/zero")
    with pytest.raises(AuditError, match="symlink"):
        AuditLog(other).read()
    assert time.monotonic() - started < 5


def test_a_hostile_job_id_is_kept_exact_in_the_audit_log_and_never_written_raw(tmp_path: Path) -> None:
    hostile = "run\x1b]0;pwned\x07\u202e\x9b31m-" + "作业" * 40
    AuditLog(tmp_path).record("abort", job=hostile, result="stop requested")
    raw = (tmp_path / "audit.jsonl").read_bytes()
    assert raw.isascii() and b"\x1b" not in raw and b"\x07" not in raw
    assert json.loads(raw)["job"] == hostile and AuditLog(tmp_path).entries()[0].job == hostile


def test_file_names_from_network_names_are_bounded_and_apart() -> None:
    long_cjk = "作业" * 40
    a, b = safe_name(long_cjk, ".txt"), safe_name(long_cjk + "x", ".txt")
    assert a != b and len(a.encode()) <= 96 and a.isascii() and a.endswith(".txt")
    assert safe_name("ultra-console-261130-060000-001") == "ultra-console-261130-060000-001"
    assert safe_name("../..\x1b[2J") != safe_name("..__.._2J") and "/" not in safe_name("a/b")


def test_an_80_character_cjk_job_id_keeps_its_whole_stacks_dump(tmp_path: Path) -> None:
    from backend.cluster.stack_groups import StacksReport
    from backend.cluster.stacks import save_report

    job = "作业" * 40 + "\u202e\x9d0;t\x9c"
    report = StacksReport.build(job, 0.0, [], nodes_asked=1)
    path = save_report(report, tmp_path)  # was: OSError, file name too long
    assert len(path.name.encode()) <= 96 and path.name.isascii()
    saved = path.read_text()
    assert "作业" in saved and "\u202e" not in saved and "\x9d" not in saved


def test_blank_lines_in_megatron_argument_dump_cost_linear_time() -> None:
    from backend.signals.launch_flags import ArgumentDump

    def seconds(n: int) -> float:
        dump = ArgumentDump()
        started = time.perf_counter()
        dump.feed("------------ arguments ------------\n" + "\n" * n + "no argument\n  lr ........ 1e-6\n")
        assert dump.flags() is not None and "--lr" in dump.flags().flags  # type: ignore[union-attr]
        return time.perf_counter() - started

    assert seconds(40_000) < 0.5  # was ~25 s: quadratic in the blank lines
