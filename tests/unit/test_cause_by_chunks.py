"""The live header and `status` name one root (issue 26): the app reads a log chunk by chunk as it comes,
`status` reads it whole; where the chunks break must never change the cause, its fields or its words.

The host-OOM log of `--sim-fail host-oom` (captured from a real Ray 2.60 cluster): the raylet's OOM-kill
line, then the driver's `OutOfMemoryError` naming the worker Ray killed. Read live, a chunk that ended just
after the raylet's line left that line's actor block to be read again with the next chunk, and the re-read
put the raylet back in place of the killed actor ("Ray killed raylet for host memory … ? of ?").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.sanitize import sanitize_text
from backend.signals.monitor import RunMonitor

SIM_FAIL = Path(__file__).resolve().parents[1] / "data" / "sim_fail"
RAYLET_OOM = "Workers (tasks / actors) killed due to memory pressure (OOM)"


def _read(chunks: list[str]) -> tuple[dict[str, Any], str]:
    """The diagnosis (as `status --json` prints it) and the Run header's phrase, after these chunks."""
    monitor = RunMonitor()
    monitor.on_job_status("RUNNING")
    for chunk in chunks:
        monitor.feed_text(chunk)
    monitor.on_job_status("FAILED", "exit code 1")
    found = monitor.diagnosis()
    assert found is not None
    return found.to_json(), monitor.alerts.headline()


@pytest.mark.parametrize("log", ["host-oom.log", "train-oom.log", "nccl-timeout.log", "engine-start.log"])
def test_every_chunking_names_the_cause_a_whole_read_names(log: str) -> None:
    lines = sanitize_text((SIM_FAIL / log).read_text()).splitlines(keepends=True)
    whole, header = _read(["".join(lines)])
    assert header == f"FAILED: {whole['message']}"
    for cut in range(1, len(lines)):
        got = _read(["".join(lines[:cut]), "".join(lines[cut:])])
        assert got == (whole, header), f"cut after line {cut}: {got[0]['message']!r}"
    assert _read(lines) == (whole, header)  # a line a chunk, as a slow tail delivers them


def test_the_raylets_oom_line_is_the_root_naming_the_killed_worker() -> None:
    lines = sanitize_text((SIM_FAIL / "host-oom.log").read_text()).splitlines(keepends=True)
    raylet = next(i for i, line in enumerate(lines) if RAYLET_OOM in line)
    cause, header = _read(["".join(lines[: raylet + 1]), "".join(lines[raylet + 1 :])])
    assert (cause["id"], cause["role"], cause["actor"], cause["pid"], cause["node"]) == (
        "host-oom",
        "train",
        "MegatronTrainRayActorWithConcurrencyGroups",
        "7374",
        "127.0.0.1",
    ), cause
    assert "1.9TB of 2.0TB" in cause["message"] and "raylet" not in cause["message"], cause["message"]
    assert header == f"FAILED: {cause['message']}"
    assert [c["id"] for c in cause["consequences"]] == ["actor-died", "actor-died"]  # the actor's death
