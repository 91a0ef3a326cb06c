"""Policy that lives in backend/cluster and that the app and the CLI only read: the launch re-check, the
abort escalation, durations, lost work, and the leftover report's sentences."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.cluster.abort_policy import FORCE_WAIT_S, RAY_DEFAULT_STOP_WAIT_S, WATCH_MARGIN_S, abort_policy
from backend.cluster.audit import AuditLog
from backend.cluster.controller import LaunchRefused, RunController
from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.durations import RunTiming, fmt_duration
from backend.cluster.leftovers import (
    Identity,
    JobFootprint,
    Leftover,
    LeftoverReport,
    NodeCheck,
    footprint_from_audit,
)
from backend.cluster.lost_work import LostWork
from backend.plan.spec import build_spec

PRESET = "nemotron-3-ultra-550b-a55b"


async def test_launch_rechecks_the_spec_whatever_findings_the_caller_passes(tmp_path: Path) -> None:
    bad = build_spec(PRESET, ["cluster.nodes=15"])  # A1: TP x PP does not divide the GPUs
    async with RayClient("http://127.0.0.1:9", timeout=1.0, retries=0) as client:
        ctl = RunController(client, state_dir=tmp_path)
        with pytest.raises(LaunchRefused) as refused:
            await ctl.launch(bad, check_cluster=False)
        assert client.requests_made == 0  # refused before anything reached Ray: nothing submitted
    assert any(f.rule == "A1" and f.severity == "error" for f in refused.value.findings)
    assert "[A1]" in str(refused.value)
    entry = AuditLog(tmp_path).entries()[-1]
    assert entry.action == "launch" and entry.job is None and "refused" in entry.result


def _job(env: dict[str, str] | None = None, **kw: Any) -> JobInfo:
    return JobInfo(
        submission_id="ultra-console-x", runtime_env={"env_vars": env} if env is not None else None, **kw
    )


def test_one_escalation_for_app_and_cli() -> None:
    ours = abort_policy(_job({"RAY_JOB_STOP_SIGNAL": "SIGINT", "RAY_JOB_STOP_WAIT_TIME_S": "120"}))
    assert (ours.signal, ours.grace_s) == ("SIGINT", 120)
    assert ours.wait_s(forced=False) == 120 + WATCH_MARGIN_S
    assert ours.wait_s(forced=True) == FORCE_WAIT_S
    assert "SIGINT" in ours.stop_message() and "120 s" in ours.stop_message()
    theirs = abort_policy(_job(None))  # launched by miles' own launcher: Ray's defaults
    assert (theirs.signal, theirs.grace_s) == ("SIGTERM", RAY_DEFAULT_STOP_WAIT_S)
    garbled = abort_policy(_job({"RAY_JOB_STOP_WAIT_TIME_S": "soon"}))
    assert garbled.grace_s == RAY_DEFAULT_STOP_WAIT_S
    told = abort_policy(_job({}), wait_s=7.0)  # the operator's --timeout wins for both steps
    assert told.wait_s(forced=False) == told.wait_s(forced=True) == 7.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (-1, "—"),
        (float("nan"), "—"),
        (0, "0s"),
        (14.9, "14s"),
        (185, "3m05s"),
        (7620, "2h07m"),
        (97200, "1d03h"),
    ],
)
def test_fmt_duration(seconds: float | None, text: str) -> None:
    assert fmt_duration(seconds) == text


def test_run_timing_grows_while_running_and_freezes_at_the_end() -> None:
    live = RunTiming(1000.0, None, 1014.0)
    assert live.elapsed_s == 14 and live.text(terminal=False) == "elapsed 14s"
    ended = RunTiming(1000.0, 1185.0, 5000.0)
    assert ended.elapsed_s == 185 and ended.text(terminal=True) == "ran 3m05s"
    assert RunTiming(None, None, 5.0).text(terminal=False) == "elapsed —"


def test_lost_work_arithmetic() -> None:
    lost = LostWork(since_checkpoint_s=450, rollouts_done=12, last_checkpoint_rollout=9, gpus=128)
    assert lost.rollouts == 2  # rollouts 10 and 11 came after the checkpoint of rollout 9
    assert lost.gpu_hours == pytest.approx(16.0)
    assert lost.text() == (
        "Will be lost: 7m30s of training since the last checkpoint, 2 rollout(s), ≈16.0 GPU-hours."
    )
    assert LostWork(checkpoints_saved=0).text().startswith("No checkpoint has been saved yet")
    assert "not known yet" in LostWork().text()
    assert LostWork(rollouts_done=3, last_checkpoint_rollout=5).rollouts == 0


def _leftover(identity: Identity, pid: int) -> Leftover:
    return Leftover(
        "n1" * 20, "node-1 (n1n1n1n1)", 2, pid, 12806, identity, f"why {pid}: detail {pid}", "python"
    )


def test_leftover_report_says_what_the_nodes_said() -> None:
    quiet = NodeCheck("n2" * 20, "node-2 (n2n2n2n2)", False, "no answer in 45 s")
    ok = NodeCheck("n1" * 20, "node-1 (n1n1n1n1)", True)
    clean = LeftoverReport("job-1", (ok,))
    assert clean.clean and clean.summary().startswith("no leftover GPU processes (1 of 1 node(s) answered")
    report = LeftoverReport("job-1", (ok, quiet), (_leftover("job", 11), _leftover("unidentified", 12)))
    assert not report.clean
    assert [i.pid for i in report.killable] == [11] and [i.pid for i in report.unidentified] == [12]
    text = "\n".join(report.lines())
    assert "pid 11 (python) on node-1 (n1n1n1n1) GPU 2, 12806 MiB" in text
    assert "cannot identify as the job's (never signalled)" in text and "detail 12" in text
    assert "node node-2 (n2n2n2n2) did not answer: no answer in 45 s" in text
    assert report.summary() == (
        "1 process(es) of the job left behind; 1 held by processes not provably the "
        "job's (1 of 2 node(s) answered)"
    )
    # a node that answered without a GPU provider is not "clean" either
    assert not LeftoverReport("job-1", (NodeCheck("n3", "n3", True, nvml=False),)).clean


def test_footprint_round_trips_through_the_audit_log(tmp_path: Path) -> None:
    fp = JobFootprint(
        "sid-1", "02000000", "nodeA", (("nodeA", 100), ("nodeB", 200), ("nodeB", 201)), listed=True
    )
    assert fp.node_ids == ("nodeA", "nodeB") and fp.complete
    assert not JobFootprint("sid-1", "02000000", "nodeA").complete  # Ray never said where its actors ran
    assert JobFootprint("sid-1", "", "nodeA").complete  # no Ray driver: nothing ran beyond its node
    assert fp.identity_args("nodeB") == [
        "--submission-id",
        "sid-1",
        "--job-id",
        "02000000",
        "--worker-pid",
        "200",
        "--worker-pid",
        "201",
    ]
    audit = AuditLog(tmp_path)
    audit.record("abort", job="sid-1", result="stop requested", details={"footprint": fp.to_json()})
    audit.record("abort", job="sid-2", result="stop requested", details={})
    assert footprint_from_audit(audit.entries(), "sid-1") == fp
    assert footprint_from_audit(audit.entries(), "sid-2") is None
