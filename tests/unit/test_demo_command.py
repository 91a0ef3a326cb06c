"""`ultra-console demo` pieces that need no cluster: its preset and its argument checks."""

from __future__ import annotations

import argparse

import pytest

from backend.demo.simtrainer import SIM_TRAIN_SCRIPT, is_simulated
from backend.errors import ConsoleError
from backend.plan import checks as constraints
from backend.plan.spec import load_preset
from console.cli import main
from console.commands.demo import run, write_demo_preset


def test_demo_preset_is_the_4layer_recipe_on_the_simulator(tmp_path):
    args = argparse.Namespace(nodes=4, rollouts=7, step_seconds=0.5)
    path, spec = write_demo_preset(args, tmp_path)
    again = load_preset(str(path))  # the plan view starts from this file
    assert again.model_dump() == spec.model_dump()
    assert spec.model.num_layers == 4 and spec.cluster.nodes == 4 and spec.batch.num_rollout == 7
    assert spec.paths.resolved_train_script == SIM_TRAIN_SCRIPT and is_simulated(spec.paths.train_script)
    assert "--sim-step-seconds 0.5" in spec.run.extra_args
    assert not constraints.has_errors(constraints.check(spec))
    # what preflight checks on the head exists, inside the demo's own directory
    assert (tmp_path / "models" / spec.model.name / "config.json").is_file()
    assert (tmp_path / "datasets" / spec.data.prompt_data).is_file()
    assert str(spec.paths.output_dir).startswith(str(tmp_path))


def test_demo_speaks_an_old_miles_and_can_die_of_oom(tmp_path):
    args = argparse.Namespace(nodes=2, rollouts=7, step_seconds=0.5, log_format="2026-04", oom_at_rollout=3)
    _path, spec = write_demo_preset(args, tmp_path)
    assert spec.run.extra_args == "--sim-step-seconds 0.5 --sim-log-format 2026-04 --sim-oom-at-rollout 3"
    from backend.demo.simtrainer.args import parse

    sim = parse(spec.run.extra_args.split())
    assert (sim.log_format, sim.oom_at_rollout, sim.step_seconds) == ("2026-04", 3, 0.5)


def test_demo_can_die_each_way_a_real_run_does(tmp_path):
    from backend.demo.simtrainer.args import parse

    args = argparse.Namespace(nodes=1, rollouts=3, step_seconds=0.5, fail="nccl-timeout")
    _path, spec = write_demo_preset(args, tmp_path)
    sim = parse(spec.run.extra_args.split())
    assert (sim.fail, sim.fail_at_rollout, sim.culprit_rank) == ("nccl-timeout", 1, 7)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--fail", "meteor"], "invalid choice: 'meteor'"),
        (["demo", "--nodes", "3"], "invalid choice: 3"),
        (["demo", "--rollouts", "0"], "--rollouts must be >= 1"),
        (["demo", "--log-format", "2025"], "invalid choice: '2025'"),
    ],
)
def test_demo_bad_arguments_are_one_line(capsys, argv, message):
    code: int | str | None
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's usage error (status 1, one line)
        code = exit_.code
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_run_refuses_before_starting_anything():
    with pytest.raises(ConsoleError):
        run(argparse.Namespace(nodes=99, rollouts=1, step_seconds=1.0, no_launch=False, no_tui=True))
