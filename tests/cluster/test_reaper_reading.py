"""The reaper reads a real NVML answer the way Ray 2.60's GPU provider gives it (captured on an H200)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ray.dashboard.modules.reporter import gpu_providers

from backend.cluster import reaper_job

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "ray_samples" / "h200_reaper_identity.json"


def test_real_provider_reading_parsed_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    capture = json.loads(CAPTURE.read_text())
    reading = json.loads(capture["ray_provider_reading"])
    for gpu in reading:  # the provider's keys are ints (JSON made them strings); one utilisation is null
        gpu["processes_pids"] = {int(pid): info for pid, info in gpu["processes_pids"].items()}
    monkeypatch.setattr(gpu_providers.GpuMetricProvider, "initialize", lambda self: True)
    monkeypatch.setattr(gpu_providers.GpuMetricProvider, "get_gpu_usage", lambda self: reading)
    result = reaper_job.gpu_reading()
    assert result is not None
    holders, gpus = result
    orphan, bystander = capture["orphan_pid"], capture["bystander_pid"]
    assert sorted(holders) == [(0, orphan, 3518), (0, bystander, 1518)]
    assert gpus == [(0, 5665, 143771)]
    # what the reaper concluded on that machine: the job's orphan killed, the bystander spared
    assert [(r["pid"], r["identity"]) for r in capture["list"] if r["pid"] > 0] == [
        (orphan, "job"),
        (bystander, "unidentified"),
    ]
    assert {r["pid"]: r["action"] for r in capture["kill"] if r["pid"] > 0} == {
        orphan: "killed",
        bystander: "skipped",
    }
    assert capture["bystander_alive_after"] and orphan not in capture["nvml_pids_after"]
