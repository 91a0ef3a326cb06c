"""The rollout sample reader (backend.signals.rollout_data) and the GRPO groups (backend.signals.grpo_groups),
over files miles' own writer made (tests/support/miles_rollout_writer.py, real torch 2.13) and files written
in the same format by backend.demo.rollout_dump."""

from __future__ import annotations

import os
import pickle
import sys
import time
import types
from pathlib import Path

import pytest

from backend.demo.rollout_dump import rollout_path, sample_record, write_rollout
from backend.demo.torch_zip import torch_zip_bytes
from backend.safe_unpickle import BrokenPickleError, PickleRefusedError
from backend.signals.grpo_groups import advantages, prompt_head, rollout_groups, think_split
from backend.signals.monitor import RunMonitor
from backend.signals.rollout_data import (
    RolloutNotReady,
    RolloutShelf,
    list_rollouts,
    read_rollout,
    reward_value,
    weight_versions,
)

DATA = Path(__file__).parent.parent / "data" / "rollout_data"
LATER = 1e12  # "now" far past every file's mtime: nothing is young


def _record(group: int, index: int, reward: object = 1, **kw: object) -> dict[str, object]:
    length = int(kw.pop("response_length", 10))  # type: ignore[call-overload]
    return sample_record(
        group,
        index,
        prompt=kw.pop("prompt", f"<|im_start|>user\nQ{group}?<|im_end|>\n<|im_start|>assistant\n"),
        tokens=list(range(5 + length)),
        response=kw.pop("response", f"thinking {index} </think> answer {index}"),
        response_length=length,
        rollout_log_probs=[-0.1] * length,
        reward=reward,
        status=kw.pop("status", "completed"),
        weight_versions=kw.pop("weight_versions", ["1"]),
        **kw,
    )


def test_miles_written_example_is_the_reference_one() -> None:
    """§7 of the reference, written by miles' save_debug_rollout_data on real torch."""
    rollout = read_rollout(DATA / "miles_4x4" / "rollout_data" / "0.pt", now=LATER)
    assert (rollout.name, rollout.rollout, rollout.evaluation) == ("0", 0, False)
    assert [s.index for s in rollout.samples] == list(range(8))
    assert not hasattr(rollout.samples[0], "tokens")  # dropped once its length was taken
    assert rollout.samples[0].prompt_length == 12 and rollout.samples[0].response_length == 61
    groups = rollout_groups(rollout)
    g0, g1 = groups.groups
    assert g0.rewards == (1.0, 1.0, 0.0, 1.0) and g0.mean == 0.75 and g0.std == pytest.approx(0.5)
    assert [round(a or 0, 4) for a in g0.advantages] == [0.5, 0.5, -1.5, 0.5]
    assert not g0.zero_std and g0.truncated == 0
    assert g1.rewards == (1.0, 0.0, 0.0, 1.0) and g1.truncated == 1
    truncated = [s for s in rollout.samples if s.truncated]
    assert [(s.index, s.response_length) for s in truncated] == [(6, 96)]
    assert g0.prompt_head == "What is 2+3?"
    assert groups.zero_std == 0 and groups.truncated_frac == 1 / 8


def test_integer_rewards_all_zero_all_one_short_group_and_gap() -> None:
    """deepscaler's int rewards: the counts miles' perf percentages miss (they look up "0.0"/"1.0")."""
    groups = rollout_groups(read_rollout(DATA / "miles_int_rewards" / "rollout_data" / "1.pt", now=LATER))
    assert [g.group_index for g in groups.groups] == [8, 9, 11, 12]
    assert groups.zero_std == 3 and groups.count_of(0.0) == 1 and groups.count_of(1.0) == 2
    assert groups.zero_std_frac == 0.75
    assert groups.missing_ids == 1  # group 10 was filtered out: a real gap, not a re-chunking
    last = groups.groups[-1]
    assert last.n == 2 and last.short and last.zero_std  # cut short at the end, grouped by id all the same
    assert groups.group_size == 4 and groups.mixed_versions and groups.versions == ("1", "2")


def test_groups_follow_group_index_not_fixed_chunks(tmp_path: Path) -> None:
    """A 3-sample group then a 5-sample one: chunks of 4 would mix their rewards."""
    samples = [_record(0, i, reward=1) for i in range(3)] + [
        _record(1, 3 + i, reward=i % 2) for i in range(5)
    ]
    write_rollout(tmp_path, 2, samples)
    groups = rollout_groups(read_rollout(rollout_path(tmp_path, 2), now=LATER))
    assert [(g.group_index, g.n, g.zero_std) for g in groups.groups] == [(0, 3, True), (1, 5, False)]


def test_advantage_siblings_of_one_trajectory_count_once(tmp_path: Path) -> None:
    """miles normalises one reward per `rollout_id` (compact siblings), then broadcasts it."""
    samples = [
        _record(0, 0, reward=1, rollout_id=7),
        _record(0, 1, reward=1, rollout_id=7),
        _record(0, 2, reward=0),
    ]
    write_rollout(tmp_path, 0, samples)
    adv = advantages(read_rollout(rollout_path(tmp_path, 0), now=LATER).samples)
    # two rewards (1, 0): mean 0.5, std 0.7071 -> +-0.7071, both siblings get the first
    assert [round(a or 0, 4) for a in adv] == [0.7071, 0.7071, -0.7071]


def test_dict_rewards_and_span_versions() -> None:
    assert reward_value({"acc": 1, "fmt": 0.5}, "fmt") == 0.5
    assert reward_value({"acc": 1}) == 1.0 and reward_value({"a": 1, "b": 2}) is None
    assert reward_value(None) is None and reward_value(True) == 1.0
    assert (
        reward_value(float("nan")) is None
        and reward_value(float("inf")) is None
        and reward_value(10**400) is None
    )
    spans = [{"version": "3", "abs_start": 0, "abs_end": 9}, {"version": "4", "abs_start": 9, "abs_end": 20}]
    assert weight_versions(spans) == ("3", "4") and weight_versions(["5"]) == ("5",)


def test_text_is_sanitised_and_think_is_split(tmp_path: Path) -> None:
    evil = "ok\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b31m\u202eevil </think> done"
    write_rollout(tmp_path, 0, [_record(0, 0, response=evil, prompt="\x1b[31mQ\x1b[0m?")])
    sample = read_rollout(rollout_path(tmp_path, 0), now=LATER).samples[0]
    assert "\x1b" not in sample.response and "\x9b" not in sample.response and "\u202e" not in sample.response
    assert sample.response == "okevil </think> done"
    assert think_split(sample.response) == ("okevil ", " done") and think_split("no end") is None
    assert prompt_head("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nWhy?\n<|im_end|>") == "Why?"


def _numpy_like_pickle() -> bytes:
    """A pickle naming numpy's array rebuild (as routing replay's arrays do), made without numpy."""
    fake = types.ModuleType("numpy.core.multiarray")

    def _reconstruct(*args: object) -> None:
        raise AssertionError("never called")

    _reconstruct.__module__, _reconstruct.__qualname__ = "numpy.core.multiarray", "_reconstruct"
    fake._reconstruct = _reconstruct  # type: ignore[attr-defined]

    class Array:
        def __reduce__(self) -> tuple[object, ...]:
            return (_reconstruct, ("ndarray", (0,), b"b"))

    added = [n for n in ("numpy", "numpy.core") if n not in sys.modules]
    for name in added:
        sys.modules[name] = types.ModuleType(name)
    sys.modules["numpy.core.multiarray"] = fake
    try:
        sample = _record(0, 0, rollout_routed_experts=Array())
        return torch_zip_bytes({"rollout_id": 0, "metadata": {}, "samples": [sample]}, "0")
    finally:
        for name in ("numpy.core.multiarray", *added):
            del sys.modules[name]


def test_numpy_array_is_refused_and_named(tmp_path: Path) -> None:
    path = rollout_path(tmp_path, 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(_numpy_like_pickle())
    with pytest.raises(PickleRefusedError) as err:
        read_rollout(path, now=LATER)
    assert "numpy.core.multiarray._reconstruct" in str(err.value) and "needs torch/miles" in str(err.value)
    shelf = RolloutShelf(tmp_path)
    assert shelf.poll(now=LATER) == [] and shelf.state("0") == "refused" and "numpy" in shelf.note("0")
    monitor = RunMonitor()
    monitor.attach_dump(tmp_path)
    monitor.poll_dump()
    (problem,) = [p for p in monitor.snapshot()["problems"] if "0.pt" in p]
    assert "needs torch/miles to read" in problem and "numpy.core.multiarray._reconstruct" in problem


def test_reduce_payload_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, ...]:
            return (os.system, (f"touch {marker}",))

    path = rollout_path(tmp_path, 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(torch_zip_bytes({"rollout_id": 0, "samples": [Payload()]}, "0"))
    raw = tmp_path / "raw.pkl"
    raw.write_bytes(pickle.dumps({"samples": [Payload()]}, protocol=4))
    for target in (path, raw):
        with pytest.raises(PickleRefusedError) as err:
            read_rollout(target, now=LATER)
        assert "system" in str(err.value)
    assert not marker.exists()


def test_half_written_file_is_retried_never_empty(tmp_path: Path) -> None:
    samples = [_record(0, i, reward=i % 2) for i in range(4)]
    path = write_rollout(tmp_path, 0, samples, partial=0.6)
    written = path.stat().st_mtime
    with pytest.raises(RolloutNotReady):
        read_rollout(path, now=written + 1)
    shelf = RolloutShelf(tmp_path)
    assert shelf.poll(now=written + 1) == [] and shelf.state("0") == "pending"
    assert shelf.poll(now=written + 2) == []  # tried again, still not shown
    write_rollout(tmp_path, 0, samples)  # the writer finished
    (got,) = shelf.poll(now=time.time())
    assert len(got.samples) == 4 and shelf.state("0") == "read"
    assert shelf.poll(now=time.time()) == []  # read once
    old = write_rollout(tmp_path, 1, samples, partial=0.3)
    with pytest.raises(BrokenPickleError):  # broken and old: named, not waited for forever
        read_rollout(old, now=old.stat().st_mtime + 120)


def test_files_listed_in_order_and_opened_on_demand(tmp_path: Path) -> None:
    for n in (10, 2, 0):
        write_rollout(tmp_path, n, [_record(n, n)])
    write_rollout(tmp_path, 0, [_record(0, 0)], evaluation=True)
    (tmp_path / "rollout_data" / "notes.txt").write_text("x")
    assert [f.name for f in list_rollouts(tmp_path)] == ["0", "2", "10", "eval_0"]
    assert [f.name for f in list_rollouts(tmp_path / "rollout_data")] == ["0", "2", "10", "eval_0"]
    shelf = RolloutShelf(tmp_path, kept=2)
    assert len(shelf.poll(now=LATER)) == 4
    again = shelf.open("0", now=LATER)  # dropped from the cache (kept=2): read again
    assert again is not None and again.samples[0].group_index == 0
    assert shelf.open("99") is None


def test_real_torch_save_reads_the_same(tmp_path: Path) -> None:
    """torch.save itself (the test extra's torch 2.13) writes what the reader reads."""
    torch = pytest.importorskip("torch")
    samples = [_record(3, 24 + i, reward=i % 2, weight_versions=["4"]) for i in range(8)]
    path = tmp_path / "rollout_data" / "3.pt"
    path.parent.mkdir()
    torch.save({"rollout_id": 3, "metadata": {}, "samples": samples}, path)
    rollout = read_rollout(path, now=LATER)
    groups = rollout_groups(rollout)
    assert rollout.rollout == 3 and len(rollout.samples) == 8
    assert groups.groups[0].rewards == tuple(float(i % 2) for i in range(8)) and groups.versions == ("4",)


def test_miles_written_eval_round_with_masks_and_dict_rewards() -> None:
    path = DATA / "miles_eval" / "rollout_data" / "eval_3.pt"
    assert [f.name for f in list_rollouts(path.parent)] == ["eval_3"]
    rollout = read_rollout(path, reward_key="acc", now=LATER)
    assert (rollout.name, rollout.rollout, rollout.evaluation) == ("eval_3", 3, True)
    assert [s.reward for s in rollout.samples] == [0.0, 1.0, 0.0]
    assert all(s.effective_length == s.response_length - 4 for s in rollout.samples)  # tool tokens masked
    groups = rollout_groups(rollout)
    assert groups.evaluation and groups.versions == ("1", "3", "4")
    two_numbers = read_rollout(path, now=LATER)  # no --reward-key: a dict of two numbers has no one reward
    assert {s.reward for s in two_numbers.samples} == {None}
    monitor = RunMonitor()
    monitor.attach_dump(path.parent.parent)
    monitor.poll_dump()
    assert monitor.collector.series.get("samples/zero_std_frac") is None  # eval rounds are not training
