"""Issue 26 points 3 and 6: NCCL ranks read right (global vs group, "did not time out" only with evidence),
and failures the run outlived are incidents, not its cause (fixtures from miles-log-formats.md §3 / §3b)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.sanitize import sanitize_text
from backend.signals.failures import Diagnosis, FailureScanner, diagnose, incidents
from backend.signals.monitor import RunMonitor
from console.cli import main

ESC = "\x1b[2m\x1b[36m"
END = "\x1b[0m"


def _train(pid: int, text: str, ip: str = "10.0.3.9") -> str:
    return f"{ESC}(MegatronTrainRayActor pid={pid}, ip={ip}){END} {text}"


def _watchdog(global_rank: int, group_rank: int, second: int = 5) -> str:
    return _train(
        4100 + global_rank,
        f"[rank{global_rank}]:[E1201 10:10:{second:02d}.123456789 ProcessGroupNCCL.cpp:616] "
        f"[Rank {group_rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, "
        "OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) ran for 600060 "
        "milliseconds before timing out.",
    )


def _scan(lines: list[str]) -> FailureScanner:
    scanner = FailureScanner()
    scanner.feed(sanitize_text("\n".join(lines) + "\n"))
    return scanner


def _diagnose(scanner: FailureScanner, world: int | None = None) -> Diagnosis | None:
    return diagnose(
        scanner.events,
        world=world,
        ranks_seen=sorted(scanner.ranks_seen),
        ranks_alive=scanner.ranks_alive,
        progress=scanner.progress,
    )


def test_global_rank_and_group_rank_are_told_apart() -> None:
    """`[rank12]:` is the world rank, `[Rank 4]` the rank inside the group: the old scanner reported 4."""
    scanner = _scan(
        [
            _watchdog(12, 4),
            _train(
                4112,
                "[rank12]:[E1201 10:10:05.223 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID "
                "11(TENSOR_MODEL_PARALLEL_GROUP) Rank 4]  failure detected by watchdog at work sequence id: "
                "1580 PG status: last enqueued work: 1582, last completed work: 1579",
            ),
        ]
    )
    found = _diagnose(scanner)
    assert found is not None
    cause = found.cause
    assert (cause.id, cause.rank, cause.global_rank, cause.group_rank) == ("nccl-timeout", "12", 12, 4)
    assert cause.node == "10.0.3.9" and cause.role == "train"
    payload = found.to_json()
    assert payload["global_rank"] == 12 and payload["group_rank"] == 4 and "unknown_ranks" in payload


@pytest.mark.parametrize(
    "rank2_line",
    [
        # cut mid-line by the paste: rank 2 timed out as well, or not: the log cannot say
        "[rank2]:[E1201 10:10:05.123456789 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collec",
        # a line from before the timeout only (start-up)
        "[rank2]:[W1201 10:00:01.000 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 2] using GPU 2 to "
        "perform barrier as devices used by this process are currently unknown.",
    ],
)
def test_a_rank_without_evidence_is_unknown_never_a_suspect(rank2_line: str) -> None:
    scanner = _scan([_watchdog(0, 0), _watchdog(1, 1), _watchdog(3, 3), _train(4102, rank2_line)])
    found = _diagnose(scanner, world=4)
    assert found is not None
    assert "did not time out" not in found.cause.message, found.cause.message
    assert "1 rank(s) unknown (2)" in found.cause.message
    assert found.cause.unknown_ranks == (2,)


def test_a_rank_alive_after_the_timeout_is_the_suspect() -> None:
    scanner = _scan(
        [
            _watchdog(0, 0),
            _watchdog(1, 1),
            _train(4102, "[rank2]:[W1201 10:10:30.000 logging.py:12] still in forward, waiting on pp peer"),
        ]
    )
    found = _diagnose(scanner, world=4)
    assert found is not None
    assert "rank(s) 2 did not time out (alive after it)" in found.cause.message
    assert found.cause.unknown_ranks == (3,)


def _step(n: int, grad: str) -> str:
    return _train(
        4101,
        f"[2026-03-02 10:00:{n:02d}] log_utils.py:443 - step {n}: "
        f"{{'train/loss': 0.012, 'train/grad_norm': {grad}}}",
        ip="10.0.0.3",
    )


NAN_SKIPPED = [*(_step(n, "0.21") for n in range(1, 5)), _step(5, "nan"), _step(6, "0.2"), _step(7, "0.19")]


def test_a_nan_grad_norm_followed_by_finite_steps_is_an_incident() -> None:
    scanner = _scan(NAN_SKIPPED)
    assert _diagnose(scanner) is None  # the old code: "NaN in training" as the cause
    (incident,) = incidents(scanner.events, progress=scanner.progress)
    assert incident.finding.id == "nan" and incident.progress == "step 6" and incident.progress_after == 2


def test_two_nan_grad_norms_in_a_row_or_a_nan_loss_is_divergence() -> None:
    twice = _scan([*NAN_SKIPPED[:4], _step(5, "nan"), _step(6, "nan"), _step(7, "0.2")])
    assert (found := _diagnose(twice)) is not None and found.cause.id == "nan"
    loss = _scan(
        [
            _step(1, "0.2"),
            _train(
                4101,
                "[2026-03-02 10:00:02] log_utils.py:443 - step 2: "
                "{'train/loss': nan, 'train/grad_norm': 0.2}",
            ),
            _step(3, "0.2"),
        ]
    )
    assert (found := _diagnose(loss)) is not None and found.cause.id == "nan"


HELPER_DIED = [
    *(_step(n, "0.2") for n in range(1, 3)),
    f"{ESC}(CommandActor pid=7001, ip=10.0.0.5){END} ray.exceptions.ActorDiedError: The actor died "
    "unexpectedly before finishing this task. class_name: DashboardCollector",
    *(_step(n, "0.2") for n in range(3, 6)),
]


def test_a_caught_error_followed_by_progress_is_an_incident_and_a_later_one_the_cause() -> None:
    scanner = _scan(HELPER_DIED)
    assert _diagnose(scanner) is None
    assert [i.finding.id for i in incidents(scanner.events, progress=scanner.progress)] == ["actor-died"]
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB. GPU 3 has a total capacity "
        "of 139.80 GiB of which 1.02 GiB is free."
    )
    died = _scan(
        [
            *HELPER_DIED,
            _train(4101, "Traceback (most recent call last):", "10.0.0.3"),
            _train(4101, oom, "10.0.0.3"),
        ]
    )
    found = _diagnose(died)
    assert found is not None and found.cause.id == "cuda-oom" and found.cause.gpu == "3"
    assert [i.finding.id for i in found.incidents] == ["actor-died"]
    assert "actor-died" not in [c.id for c in found.consequences]


def test_a_replayed_tail_is_not_progress() -> None:
    """The job banner replays the tail: old step lines after the error are not the run going on."""
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB."
    body = [
        *(_step(n, "0.2") for n in range(1, 4)),
        _train(4101, "Traceback (most recent call last):"),
        _train(4101, oom),
    ]
    scanner = _scan([*body, "Job 'raysubmit_1' failed", *body])
    found = _diagnose(scanner)
    assert found is not None and found.cause.id == "cuda-oom" and found.incidents == ()


def test_metrics_exits_0_or_3_for_a_run_that_outlived_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "job.log"
    log.write_text("\n".join([*HELPER_DIED, _step(6, "nan"), _step(7, "0.2"), _step(8, "0.2")]) + "\n")
    code = main(["metrics", "--from-log", str(log), "--json"])
    out, _ = capsys.readouterr()
    assert code in (0, 3)
    snap = json.loads(out)
    assert snap["cause"] is None
    assert [i["id"] for i in snap["incidents"]] == ["actor-died", "nan"]
    assert snap["incidents"][1]["progress"] == "step 7"


def test_progress_in_a_later_chunk_turns_the_cause_into_an_incident_in_the_header() -> None:
    """Live: the error's chunk names it the cause ("FAILING: …"); the steps that come in later chunks make it
    an incident, and the header stops calling it the run's failure."""
    monitor = RunMonitor()
    monitor.on_job_status("RUNNING")
    error = [
        _train(4101, "Traceback (most recent call last):"),
        _train(4101, "TimeoutError: one request timed out (logged and skipped)"),
    ]
    monitor.feed_text(sanitize_text("\n".join([_step(1, "0.2"), *error]) + "\n"))
    assert monitor.alerts.headline().startswith("FAILING: ")
    for n in range(2, 4):
        monitor.feed_text(sanitize_text(_step(n, "0.2") + "\n"))
    header = monitor.alerts.headline()  # a blind spot of the tiny log may be said; the error is not
    assert "TimeoutError" not in header and not header.startswith(("FAILING", "failure")), header
    (alert,) = [a for a in monitor.alerts.alerts if a.id == "python-error"]
    assert alert.cause is None and alert.message.startswith("incident (the run went on: step 2")


def _rollout(n: int) -> str:
    return _train(
        4101, f"[2026-03-02 10:01:{n:02d}] log_utils.py:520 - rollout {n}: {{'rollout/raw_reward': 0.5}}"
    )


NODE_DEAD = (
    "The node with node id: 47b2c3edb71561a9 and address: 10.0.0.7 and node name: 10.0.0.7 has been marked "
    "dead because the detector has missed too many heartbeats from it."
)
CALL_FAILED = (
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
    "class_name: MegatronTrainRayActor"
)


@pytest.mark.parametrize("seen_in", ["generate", "train"])
def test_a_node_death_is_the_cause_though_the_rollout_in_flight_still_logs(seen_in: str) -> None:
    """Ray's notice that a node died reaches the driver by another path than the surviving ranks' lines: the
    rollout in flight (its `rollout N` line and steps, if Ray saw the death while it generated; the rest of
    its steps, if while it trained) may follow it. That is not the run outliving the node (CI's flake: the
    cause went to the driver's ActorDiedError, the node's death called an incident)."""
    head = [_rollout(1), _step(2, "0.2"), _step(3, "0.2")]
    in_flight = (
        [_rollout(2), _step(4, "0.2"), _step(5, "0.2")] if seen_in == "generate" else [_step(5, "0.2")]
    )
    if seen_in == "train":
        head.extend([_rollout(2), _step(4, "0.2")])
    scanner = _scan([*head, NODE_DEAD, *in_flight, CALL_FAILED])
    found = _diagnose(scanner)
    assert found is not None and found.cause.id == "node-dead", found
    assert found.incidents == () and "actor-died" in [c.id for c in found.consequences]
    # a rollout begun after the one in flight is the run's own progress: then it did outlive the notice
    outlived = _scan([*head, NODE_DEAD, *in_flight, _rollout(3), _step(6, "0.2"), _step(7, "0.2")])
    assert _diagnose(outlived) is None
    (incident,) = incidents(outlived.events, progress=outlived.progress)
    assert incident.finding.id == "node-dead" and incident.progress == "rollout 3"
