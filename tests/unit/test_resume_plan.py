"""Resume (issue 30): fixes as data, the advice, a foreign argv read back, the checkpoint chosen."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from backend.cluster.checkpoint_read import read_save_dir
from backend.cluster.checkpoints import choose
from backend.json_fields import Fields
from backend.plan.argv_spec import spec_from_argv
from backend.plan.fixes import FixCatalogError, advise, apply_edits, default_fixes, load_fixes, propose
from backend.plan.spec import build_spec
from backend.plan.submission import build_submission
from backend.signals.failures import load_catalog

PRESET = "nemotron-3-ultra-550b-a55b-4layer"


def test_the_fix_data_names_only_known_kinds_and_fields() -> None:
    book = load_fixes(known_kinds=[k.id for k in load_catalog().kinds])
    assert {f.kind for f in book.fixes} >= {"cuda-oom", "host-oom", "nan", "memory-saver-oom"}


def test_a_misspelt_kind_or_field_is_a_load_error(tmp_path: Path) -> None:
    bad = tmp_path / "fixes.toml"
    bad.write_text(
        '[[fix]]\nkind = "cuda-om"\nrole = "train"\nfield = "batch.max_tokens_per_gpu"\n'
        'how = "scale"\nvalue = 0.5\nwhy = "x"\n'
    )
    with pytest.raises(FixCatalogError, match="cuda-om"):
        load_fixes(bad, known_kinds=["cuda-oom"])
    bad.write_text(
        '[[fix]]\nkind = "cuda-oom"\nrole = "train"\nfield = "batch.tokens"\nhow = "set"\n'
        'value = 1\nwhy = "x"\n'
    )
    with pytest.raises(FixCatalogError, match="no plan field"):
        load_fixes(bad)


def test_a_train_oom_proposes_half_the_tokens_accepted_and_pp_offered() -> None:
    spec = build_spec(PRESET)
    edits = {e.field: e for e in propose(default_fixes(), "cuda-oom", "train", spec)}
    assert (
        edits["batch.max_tokens_per_gpu"].before == "1024"
        and edits["batch.max_tokens_per_gpu"].after == "512"
    )
    assert edits["batch.max_tokens_per_gpu"].accepted and not edits["train.pp"].accepted
    assert (
        "train.recompute_granularity" not in edits
    )  # already full: an edit that changes nothing is left out
    fixed = apply_edits(spec, edits.values())
    assert fixed.launchable and fixed.spec is not None and fixed.spec.batch.max_tokens_per_gpu == 512
    assert fixed.spec.train.pp == 1


def test_every_rule_runs_on_the_fixed_plan() -> None:
    """PP 2 on one 8-GPU node with EP 8 breaks the expert grid: accepting it is refused by the rules."""
    spec = build_spec(PRESET)
    fixed = apply_edits(spec, propose(default_fixes(), "cuda-oom", "train", spec), accepted={"train.pp"})
    assert not fixed.launchable
    assert any(f.severity == "error" and "train.pp" in f.fields for f in fixed.findings)


def test_an_engine_oom_lowers_the_fraction_within_its_bound() -> None:
    spec = build_spec(PRESET, ["rollout.mem_fraction=0.35"])
    edits = {e.field: e for e in propose(default_fixes(), "cuda-oom", "engine", spec)}
    assert edits["rollout.mem_fraction"].after == "0.3"  # 0.35 - 0.1, held at the bound
    low = build_spec(PRESET, ["rollout.mem_fraction=0.3"])
    assert "rollout.mem_fraction" not in {
        e.field for e in propose(default_fixes(), "cuda-oom", "engine", low)
    }


def test_advice_change_restart_stop() -> None:
    book, spec = default_fixes(), build_spec(PRESET)
    oom = advise(book, "cuda-oom", [], propose(book, "cuda-oom", "train", spec))
    assert oom.action == "change"
    node = advise(book, "node-dead", ["cuda-oom"], ())
    assert node.action == "restart" and node.check == "preflight"
    assert advise(book, "node-dead", ["node-dead"], ()).action == "stop"
    nan = advise(book, "nan", [], propose(book, "nan", None, spec))
    assert nan.action == "change" and nan.rollback == 1
    twice = advise(book, "nan", ["cuda-oom", "nan"], propose(book, "nan", None, spec))
    assert twice.action == "stop" and "same failure" in twice.reason
    assert advise(book, "python-error", [], ()).action == "stop"


def test_a_foreign_argv_is_read_back_and_its_unmapped_flags_listed() -> None:
    spec = build_spec(
        PRESET,
        [
            "train.pp=2",
            "train.ep=4",
            "batch.max_tokens_per_gpu=2048",
            "optimizer.lr=3e-6",
            "paths.output_dir=/data/o",
        ],
    )
    argv = build_submission(spec, run_id="261202-100000-001", nvlink=False).argv
    # by hand: a flag the plan has no field for, a constant changed, a key on the command line
    foreign = shlex.join([*argv, "--custom-flag", "7", "--moe-router-dtype", "fp16", "--wandb-key", "k3y"])
    got = spec_from_argv(foreign, PRESET)
    assert got.spec.train.pp == 2 and got.spec.train.ep == 4 and got.spec.optimizer.lr == spec.optimizer.lr
    assert got.spec.batch.max_tokens_per_gpu == 2048 and got.spec.paths.output_dir == "/data/o"
    assert got.save_dir == "/data/o/261202-100000-001/checkpoints" and got.run_id == "261202-100000-001"
    assert set(got.unmapped) == {"--custom-flag 7", "--moe-router-dtype fp16"}
    assert "--custom-flag 7" in got.spec.run.extra_args and "k3y" not in got.spec.run.extra_args
    assert "--wandb-key" in dict(got.dropped)


def test_an_argv_the_console_built_reads_back_to_the_same_plan() -> None:
    spec = build_spec(PRESET, ["train.tp=2", "rollout.mem_fraction=0.5", "checkpoint.save_interval=3"])
    got = spec_from_argv(build_submission(spec, run_id="261202-100000-002", nvlink=False).entrypoint, PRESET)
    assert got.unmapped == () and got.added == ()
    assert got.spec.model_dump() == spec.model_dump()


def _iteration(
    root: Path, it: int, files: tuple[str, ...] = ("common.pt", ".metadata", "metadata.json")
) -> None:
    d = root / f"iter_{it:07d}"
    d.mkdir(parents=True)
    for name in files:
        (d / name).write_text("x")


def test_a_partial_last_save_is_named_and_the_one_before_used(tmp_path: Path) -> None:
    _iteration(tmp_path, 1)
    _iteration(tmp_path, 2)
    _iteration(tmp_path, 3, ("common.pt",))  # killed before its finalize wrote metadata.json
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2\n")
    choice = choose(Fields(read_save_dir(str(tmp_path))))
    assert choice.iteration == 2 and not choice.fresh
    assert [p.iteration for p in choice.partial] == [3] and "metadata.json" in choice.partial[0].missing
    assert "iteration 3 is partial" in choice.note
    assert (
        choice.saved_at is not None and abs(choice.saved_at - (tmp_path / "iter_0000002").stat().st_mtime) < 1
    )


def test_a_tracker_naming_a_cut_save_falls_back(tmp_path: Path) -> None:
    _iteration(tmp_path, 1)
    _iteration(tmp_path, 2, ("common.pt", ".metadata"))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2\n")
    choice = choose(Fields(read_save_dir(str(tmp_path))))
    assert choice.iteration == 1 and choice.tracker == 2 and choice.partial[0].iteration == 2


def test_rollback_goes_one_complete_save_further(tmp_path: Path) -> None:
    for it in (1, 2, 3):
        _iteration(tmp_path, it)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3\n")
    assert choose(Fields(read_save_dir(str(tmp_path))), rollback=1).iteration == 2


def test_no_checkpoint_is_a_fresh_start(tmp_path: Path) -> None:
    missing = choose(Fields(read_save_dir(str(tmp_path / "never"))))
    assert missing.fresh and "fresh start" in missing.note
    _iteration(tmp_path, 1, ())
    empty = choose(Fields(read_save_dir(str(tmp_path))))
    assert empty.fresh and empty.partial[0].iteration == 1 and "never finished" in empty.note


def test_a_foreign_argv_without_a_preset_finds_the_one_of_its_model() -> None:
    spec = build_spec(PRESET, ["train.tp=2"])
    got = spec_from_argv(build_submission(spec, run_id="261202-100000-003", nvlink=False).entrypoint)
    assert got.spec.preset == PRESET and got.spec.model.hybrid_pattern == spec.model.hybrid_pattern
    assert got.unmapped == ()
