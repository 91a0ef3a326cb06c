"""`ultra-console samples --from-dump DIR`: the groups table, a group's samples, JSON, and the exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.demo.rollout_dump import sample_record, write_rollout
from console.cli import main

DATA = Path(__file__).parent.parent / "data" / "rollout_data"


def test_groups_table_of_the_newest_rollout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["samples", "--from-dump", str(DATA / "miles_int_rewards")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("rollout 1: 14 samples in 4 groups of 4; zero-std 3/4 (all-0 1, all-1 2)")
    assert "1 group ids missing" in out[0]
    rows = {line.split()[0]: line.split() for line in out[2:]}
    assert rows["8"][1:4] == ["4", "0000", "0.00"] and "zero" in rows["8"]
    assert rows["12"][1] == "2*"  # the short last group is marked


def test_group_samples_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["samples", "--from-dump", str(DATA / "miles_4x4"), "--rollout", "0", "--group", "1", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["rollouts"] == ["0"] and out["rollout"]["truncated"] == 1
    samples = out["group"]["samples"]
    assert [s["status"] for s in samples].count("truncated") == 1
    assert [round(s["advantage"], 3) for s in samples] == [0.866, -0.866, -0.866, 0.866]
    assert "What is 1+5?" in out["group"]["prompt"]


def test_bad_input_and_unreadable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["samples", "--from-dump", str(tmp_path)]) == 1
    assert "no rollout_data/" in capsys.readouterr().err
    write_rollout(tmp_path, 0, [sample_record(0, 0, reward=1, response="\x1b[31mred\x1b[0m")])
    assert main(["samples", "--from-dump", str(tmp_path), "--rollout", "7"]) == 1
    assert "rollouts there: 0" in capsys.readouterr().err
    assert main(["samples", "--from-dump", str(tmp_path), "--group", "3"]) == 1
    write_rollout(tmp_path, 1, [sample_record(0, 0)], partial=0.5)  # being written now
    assert main(["samples", "--from-dump", str(tmp_path), "--rollout", "1"]) == 3
    assert "still being written" in capsys.readouterr().err
    assert main(["samples", "--from-dump", str(tmp_path), "--rollout", "0", "--group", "0"]) == 0
    out = capsys.readouterr().out
    assert "red" in out and "\x1b" not in out


def test_odd_values_in_a_file_are_shown_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hand-made or damaged file: non-finite and huge numbers, wrong types, stray items."""
    wrong_types = sample_record(0, 2, reward={"a": 1, "b": 2}, weight_versions="7")
    wrong_types["group_index"] = "g"
    odd: list[Any] = [
        sample_record(0, 0, reward=float("inf"), response_length=10**400, status=None),
        sample_record(0, 1, reward=float("nan"), response_length=-5, loss_mask=[1, 1, "x", 0]),
        wrong_types,
        "not a sample",
    ]
    write_rollout(tmp_path, 0, odd)
    assert main(["samples", "--from-dump", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["rollout"]
    assert out["samples"] == 3 and out["zero_std_groups"] == 0
    assert out["groups"][0]["rewards"] == [None, None]
    assert main(["samples", "--from-dump", str(tmp_path)]) == 0


def test_advantages_as_the_run_normalised_them(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["samples", "--from-dump", str(DATA / "miles_4x4"), "--group", "0", "--json"]
    for flags, expected in (
        ([], [0.5, 0.5, -1.5, 0.5]),
        (["--disable-grpo-std-normalization"], [0.25, 0.25, -0.75, 0.25]),
        (["--disable-rewards-normalization"], [1.0, 1.0, 0.0, 1.0]),
    ):
        assert main([*base, *flags]) == 0
        samples = json.loads(capsys.readouterr().out)["group"]["samples"]
        assert [round(s["advantage"], 3) for s in samples] == expected, flags
