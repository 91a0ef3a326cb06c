"""The flight-recorder analyzer over dumps of real torch 2.13 gloo jobs (CPU, 4 ranks, rank 3 misbehaving),
captured by tests/data/flight_recorder/make_dumps.py; torch's own fr_trace crashes on these (empty
pg_config) or blames the majority on the op and size cases."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from backend.cluster.flight_recorder import (
    analyse,
    analyse_dir,
    collective_cause,
    parse_dump,
    rank_set,
    read_dir,
)
from backend.errors import ConsoleError
from console.cli import main

DATA = Path(__file__).parents[1] / "data" / "flight_recorder"


def _verdict(name: str):
    analysis = analyse_dir(DATA / name, world_size=4)
    assert analysis.verdict is not None
    return analysis, analysis.verdict


def test_a_rank_that_skips_a_collective_is_named_with_its_stack() -> None:
    _, v = _verdict("skip")
    assert (v.group, v.seq, v.op, v.ranks) == ("0", 4, "all_reduce", (0, 1, 2, 3))
    assert [(c.rank, c.kind) for c in v.culprits] == [(3, "missing")]
    assert v.culprits[0].stack[0].startswith("rank_main ")
    assert v.line().startswith(
        "rank 3 never entered all_reduce #4 of group 0 (default_pg) {0..3}; its stack:"
    )


def test_another_op_is_blamed_on_the_minority_not_the_first_file() -> None:
    _, v = _verdict("op")
    assert (v.group, v.seq, v.op) == ("0", 4, "all_reduce")
    assert [(c.rank, c.kind, c.op) for c in v.culprits] == [(3, "op", "broadcast")]
    assert v.culprits[0].stack[0].startswith("scenario_step ")


def test_other_sizes_are_blamed_on_the_minority_and_the_crashed_rank_is_dead() -> None:
    analysis, v = _verdict("size")
    assert analysis.dead == (2,)  # gloo aborted rank 2 on the size mismatch: it left no dump
    assert (v.group, v.seq, v.op, v.sizes) == ("0", 4, "all_reduce", "[[16]]")
    assert [(c.rank, c.kind, c.sizes) for c in v.culprits] == [(3, "sizes", "[[32]]")]
    assert v.culprits[0].stack[0].startswith("scenario_step ")


def test_a_slow_rank_that_completes_gives_no_verdict() -> None:
    analysis = analyse_dir(DATA / "slow", world_size=4)
    assert analysis.ranks == (0, 1, 2, 3) and analysis.dead == () and analysis.verdict is None
    assert collective_cause(DATA / "slow") is None


def test_a_dead_rank_is_named_where_the_others_wait() -> None:
    analysis, v = _verdict("dead")
    assert analysis.dead == (3,)
    assert (v.group, v.seq, v.op) == ("0", 4, "all_reduce")
    assert [(c.rank, c.kind) for c in v.culprits] == [(3, "dead")]
    assert "rank 3 left no dump" in v.line()


def test_majority_not_file_order_with_the_culprit_listed_first(tmp_path: Path) -> None:
    dumps, _ = read_dir(DATA / "op")
    renumbered = [d.__class__(3 - d.rank, d.entries, d.group_ranks) for d in dumps]  # culprit = rank 0 now
    v = analyse(renumbered).verdict
    assert v is not None and [(c.rank, c.kind) for c in v.culprits] == [(0, "op")]


def test_pg_config_ranks_win_over_entries_and_a_tie_says_so() -> None:
    def dump(rank: int, op: str) -> dict[str, object]:
        entry = {"collective_seq_id": 1, "process_group": ["5", "tp"], "profiling_name": f"nccl:{op}"}
        return {"entries": [entry], "pg_config": {"5": {"ranks": "[8, 9]"}}}

    v = analyse([parse_dump(dump(8, "all_reduce"), 8), parse_dump(dump(9, "broadcast"), 9)]).verdict
    assert v is not None and v.ranks == (8, 9) and not v.majority
    assert "no majority" in v.line()


def test_a_pickle_with_a_class_is_refused_not_run(tmp_path: Path) -> None:
    (tmp_path / "rank0").write_bytes(pickle.dumps(Path("/")))
    (tmp_path / "rank1.json").write_text(json.dumps({"entries": []}))
    dumps, bad = read_dir(tmp_path)
    assert [d.rank for d in dumps] == [1] and bad[0][0] == "rank0"
    with pytest.raises(ConsoleError):
        parse_dump({"no": "entries"}, 0)


def test_rank_set_names_a_range() -> None:
    assert rank_set(range(96, 104)) == "{96..103}" and rank_set([0, 2]) == "{0,2}"


def test_cli_from_dumps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collectives", "--from-dumps", str(DATA / "skip"), "--json"]) == 4
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["culprits"][0]["rank"] == 3 and out["verdict"]["seq"] == 4
    assert main(["collectives", "--from-dumps", str(DATA / "slow")]) == 0
    assert "every rank entered the same collectives" in capsys.readouterr().out


@pytest.mark.slow  # over 20 s alone: the full suite runs it, --fast does not
def test_a_fresh_torch_gloo_job_that_skips_is_named(tmp_path: Path) -> None:
    """Not only the captured files: the same job run now with this machine's torch (skipped without it)."""
    pytest.importorskip("torch", reason="torch==2.13.0 (the `test` extra) is not installed")
    import importlib.util
    import socket

    spec = importlib.util.spec_from_file_location("make_dumps", DATA / "make_dumps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    module.run_scenario("skip", tmp_path, port)
    v = analyse_dir(tmp_path, world_size=4).verdict
    assert v is not None and [(c.rank, c.kind) for c in v.culprits] == [(3, "missing")] and v.seq == 4
