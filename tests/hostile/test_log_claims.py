"""Hostile input, round 2 (issue 36): what a log line can claim. Text is never proof of who printed it: a shim
report counts only from a process Ray lists as a train actor (where Ray can be asked; else it is said to be
unverified), and Ray's job status outranks any banner the log prints."""

from __future__ import annotations

from backend.signals.monitor import RunMonitor
from shim import logline

TRAIN = "(MegatronTrainRayActor pid={pid}, ip=10.0.0.{node})"
RAY_ACTORS = [
    (21, "10.0.0.1", "MegatronTrainRayActor"),
    (22, "10.0.0.2", "MegatronTrainRayActor"),
    (30, "10.0.0.1", "RolloutManager"),
]


def _ordinary(pid: int, node: int) -> str:
    return f"{TRAIN.format(pid=pid, node=node)} [2026-03-02 10:00:00] train_actor.py:53 - actor up"


def _step(pid: int, node: int, step: int) -> str:
    body = f"{{'train/loss': 0.5, 'train/ppo_kl': 0.001, 'train/step': {step}}}"
    prefix = TRAIN.format(pid=pid, node=node)
    return f"{prefix} [2026-03-02 10:00:0{step}] log_utils.py:443 - step {step}: {body}"


def _shim(prefix: str, suffix: str = "") -> str:
    return f"{prefix} {logline.applied({'moe_router_topk_scaling_factor': 5.0}, mapping_only=True)}{suffix}"


# The driver prints a train actor's prefix for a pid Ray never ran, then a shim report Ray "folded" for two
# more processes: by text alone, pid 22's missing report is covered by the fold.
FORGED = [
    _shim("(pid=21, ip=10.0.0.1)"),
    _ordinary(21, 1),
    _ordinary(22, 2),
    _ordinary(23, 2),
    _shim("(MegatronTrainRayActor pid=23, ip=10.0.0.2)", " [repeated 2x across cluster]"),
    _step(21, 1, 0),
    _step(21, 1, 1),
    _step(21, 1, 2),
]


def _missing(monitor: RunMonitor) -> list[str]:
    return [a.message for a in monitor.alerts.alerts if a.id == "shim-missing"]


def test_a_forged_train_prefix_no_longer_silences_shim_missing_once_ray_lists_the_actors() -> None:
    unverified = RunMonitor()
    unverified.feed_text("\n".join(FORGED) + "\n")
    unverified.input_ended()
    assert _missing(unverified) == []  # text alone: the forged fold hides pid 22 (the old behaviour)
    monitor = RunMonitor()
    monitor.feed_text("\n".join(FORGED) + "\n")
    monitor.verify_train_actors(RAY_ACTORS)
    monitor.input_ended()
    found = _missing(monitor)
    assert len(found) == 1 and "pid=22, ip=10.0.0.2" in found[0] and "pid=23" not in found[0]
    assert "Ray's actor list" in found[0]
    assert set(monitor.alerts.shim_reports) == {"MegatronTrainRayActor pid=21, ip=10.0.0.1"}


def test_an_actor_ray_lists_that_never_logged_is_missing_and_an_unverified_verdict_says_so() -> None:
    monitor = RunMonitor()
    lines = [_shim("(pid=21, ip=10.0.0.1)"), _ordinary(21, 1), _step(21, 1, 0), _step(21, 1, 1)]
    monitor.feed_text("\n".join(lines) + "\n")
    monitor.verify_train_actors([*RAY_ACTORS, (40, "10.0.0.3", "MegatronTrainRayActor")])
    monitor.input_ended()
    found = _missing(monitor)
    assert len(found) == 1 and "pid=22" in found[0] and "pid=40" in found[0]  # never logged: still named
    offline = RunMonitor()  # a saved log: nobody to ask
    offline.feed_text("\n".join([*lines[:2], _ordinary(22, 2), *lines[2:]]) + "\n")
    offline.input_ended()
    said = _missing(offline)
    assert len(said) == 1 and "unverified" in said[0]


def test_ray_failed_outranks_a_printed_job_succeeded_banner() -> None:
    log = [
        _ordinary(21, 1),
        TRAIN.format(pid=21, node=1)
        + " torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB.",
        "Job 'raysubmit_Qx81abc' succeeded",
        "finished with status: SUCCEEDED",
    ]
    monitor = RunMonitor()
    monitor.on_job_status("FAILED", "Job entrypoint command failed with exit code 1")
    monitor.feed_text("\n".join(log) + "\n")
    found = monitor.diagnosis()
    assert found is not None and found.doubt is None  # no "Ray says the job succeeded" against Ray's FAILED
    running = RunMonitor()
    running.on_job_status("RUNNING")
    running.feed_text("\n".join(log) + "\n")
    assert (d := running.diagnosis()) is not None and d.doubt is None
    ok = RunMonitor()
    ok.on_job_status("SUCCEEDED")
    ok.feed_text("\n".join(log) + "\n")
    assert (d := ok.diagnosis()) is not None and d.doubt is not None  # Ray's own success is still doubted
