"""Learning health from a rollout's samples (backend.signals.samples_health) through the run monitor: the
zero-std fraction the alert judges comes from the samples, the log's wrong percentages are called out (in
either order), length growth on a flat reward, degenerate groups, mixed weight versions."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backend.demo.rollout_dump import sample_record, write_rollout
from backend.signals.derived import zero_std_fraction
from backend.signals.monitor import RunMonitor

DATA = Path(__file__).parent.parent / "data" / "rollout_data"
PERF_1 = (
    "(RolloutManager pid=1) [2026-08-21 10:00:00,000] rollout_manager.py:1 - perf 1: "
    "{'rollout/zero_std/count_0': 1, 'rollout/zero_std/count_1': 2, "
    "'rollout/zero_std/all_zero_percentage': 0.0, 'rollout/zero_std/all_one_percentage': 0.0, "
    "'perf/rollout_time': 10.0, 'rollout/truncated_ratio': 0.0}\n"
)


def _values(monitor: RunMonitor, key: str) -> list[float]:
    series = monitor.collector.series.get(key)
    return list(series.values) if series is not None else []


def _ids(monitor: RunMonitor) -> list[str]:
    return [a.id for a in monitor.alerts.alerts]


def test_miles_int_percentages_are_wrong_alone() -> None:
    """Without the batch size, `count_0`/`count_1` with 0.0 percentages is unknown, never a wrong 0."""
    values = {
        "rollout/zero_std/count_0": 1.0,
        "rollout/zero_std/count_1": 2.0,
        "rollout/zero_std/all_zero_percentage": 0.0,
        "rollout/zero_std/all_one_percentage": 0.0,
    }
    assert zero_std_fraction(values, None) is None
    assert zero_std_fraction(values, 4) == pytest.approx(0.75)  # with the batch size the counts are right


@pytest.mark.parametrize("log_first", [False, True])
def test_zero_std_from_samples_and_the_log_called_out(tmp_path: Path, log_first: bool) -> None:
    shutil.copytree(DATA / "miles_int_rewards", tmp_path / "dump")
    monitor = RunMonitor()
    if log_first:
        monitor.feed_text(PERF_1)
    monitor.attach_dump(tmp_path / "dump")
    monitor.poll_dump()
    if not log_first:
        monitor.feed_text(PERF_1)
    assert _values(monitor, "derived/zero_std_frac") == [0.75]  # 3 of 4 groups, from the samples
    assert _values(monitor, "samples/zero_std_log_gap") == [3.0]
    assert "zero-std-groups" in _ids(monitor) and "zero-std-log-wrong" in _ids(monitor)
    wrong = next(a for a in monitor.alerts.alerts if a.id == "zero-std-log-wrong")
    assert "miss 3 groups at rollout 1" in wrong.message


def _rollout(dump: Path, n: int, reward_mean_pattern: list[int], length: int, same: bool = False) -> None:
    samples = [
        sample_record(
            n * 4 + g,
            n * 16 + g * 4 + i,
            reward=reward_mean_pattern[i],
            response="same" if same else f"r{n}-{g}-{i} </think> x",
            response_length=length,
            tokens=list(range(length + 3)),
            status="completed",
            weight_versions=[str(n + 1)],
        )
        for g in range(4)
        for i in range(4)
    ]
    write_rollout(dump, n, samples)


def test_length_growing_on_flat_reward_fires_once(tmp_path: Path) -> None:
    monitor = RunMonitor()
    monitor.attach_dump(tmp_path)
    for n in range(7):
        _rollout(tmp_path, n, [1, 0, 1, 0], 100 + 40 * n)
        monitor.poll_dump()
    growth = _values(monitor, "samples/len_growth_flat_reward")
    assert growth[0] == pytest.approx(260 / 100 - 1)  # rollouts 0..4: 100 -> 260 tokens, reward 0.5 flat
    assert _ids(monitor).count("length-grows-reward-flat") == 1  # one episode, not one alert a rollout
    assert "zero-std-groups" not in _ids(monitor)  # every group has spread
    assert "mixed-weight-versions" not in _ids(monitor)  # one version per rollout


def test_degenerate_groups(tmp_path: Path) -> None:
    monitor = RunMonitor()
    monitor.attach_dump(tmp_path)
    _rollout(tmp_path, 0, [1, 0, 1, 0], 50, same=True)
    monitor.poll_dump()
    assert _values(monitor, "samples/degenerate_frac") == [1.0]
    assert "degenerate-groups" in _ids(monitor)
