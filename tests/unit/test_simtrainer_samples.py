"""The simulated trainer's rollout files (`--dump-details`): miles' format, read by the console's reader, and
in agreement with its own `perf N` line (the same lengths, truncation and zero-std groups)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from backend.demo.simtrainer import metrics, samples
from backend.signals.grpo_groups import rollout_groups
from backend.signals.monitor import RunMonitor
from backend.signals.rollout_data import list_rollouts, read_rollout


def test_samples_agree_with_the_perf_line(tmp_path: Path) -> None:
    for n in range(3):
        path = samples.save_rollout(str(tmp_path), n, 8, 4, 256)
        groups = rollout_groups(read_rollout(path, now=1e12))
        perf = metrics.rollout_perf(n, 8, 8, 4, 256, 1.0, False)
        assert groups.samples == 32 and len(groups.groups) == 8 and groups.group_size == 4
        assert [g.group_index for g in groups.groups] == list(range(8 * n, 8 * n + 8))  # a global counter
        assert groups.truncated_frac == perf["rollout/truncated_ratio"]
        assert groups.len_mean == perf["rollout/response_len/mean"]
        assert groups.zero_std == perf["rollout/zero_std/count_0.0"]
        assert groups.versions == (str(n + 1),)
        rollout = read_rollout(path, now=1e12)
        assert all(("</think>" in s.response) == (not s.truncated) for s in rollout.samples)
        assert all(s.reward in (0.0, 1.0) and (s.reward == 0.0 or not s.truncated) for s in rollout.samples)


def test_bare_run_writes_rollout_data_the_monitor_reads(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    args = ["--sim-log-format", "bare", "--num-rollout", "3", "--sim-step-seconds", "0.05"]
    out = subprocess.run(
        [sys.executable, "-m", "backend.demo.simtrainer", *args, "--dump-details", str(tmp_path / "dump")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert [f.name for f in list_rollouts(tmp_path / "dump")] == ["0", "1", "2"]
    monitor = RunMonitor()
    monitor.feed_text(out.stderr)
    monitor.attach_dump(tmp_path / "dump")
    monitor.poll_dump()
    gap = monitor.collector.series.get("samples/zero_std_log_gap")
    assert gap is not None and list(gap.values) == [0.0, 0.0, 0.0]  # the log and the samples agree
    assert not [a for a in monitor.alerts.alerts if a.id == "zero-std-log-wrong"]
