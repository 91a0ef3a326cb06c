"""Issue 27: what the plan shows is what miles runs.

The 7 plans the console accepted and miles' parser rejects at once, the 6 it accepted and miles ran
differently, the derived numbers miles computes otherwise, and the argument data against a miles checkout.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import typing
from pathlib import Path

import pytest

from backend.errors import SpecError
from backend.plan import miles_flags
from backend.plan.checks import check
from backend.plan.derived import layout_figures
from backend.plan.spec import RunSpec, build_spec
from backend.plan.submission import MILES_GPUS_PER_NODE, build_submission, train_argv

FULL = None
SLICE = "nemotron-3-ultra-550b-a55b-4layer"
MILES_GIT = Path(os.environ.get("MILES_GIT", "/work/.mirror/radixark+miles/repo"))


def argv(spec: RunSpec) -> list[str]:
    return build_submission(spec, run_id="r", nvlink=False, with_shim=False).argv


def rules(spec: RunSpec, severity: str | None = None) -> set[str]:
    return {f.rule for f in check(spec) if severity is None or f.severity == severity}


# ------------------------------------------------------------------ 7 plans miles' parser rejects at once


@pytest.mark.parametrize(
    ("key", "bad", "named"),
    [
        ("rollout.sglang_attention_backend", "flash_attn", "fa3"),
        ("train.attention_backend", "flash_attn", "flash"),
        ("grpo.advantage_estimator", "dapo", "reinforce_plus_plus"),
        ("grpo.kl_loss_type", "kl", "low_var_kl"),
        ("optimizer.lr_decay_style", "cos", "cosine"),
    ],
)
def test_a_field_with_a_fixed_set_takes_only_that_set(key: str, bad: str, named: str) -> None:
    with pytest.raises(SpecError) as err:
        build_spec(SLICE, [f"{key}={bad}"])
    text = str(err.value)
    assert "\n" not in text and key in text and named in text and repr(bad) in text
    choices = miles_flags.spec_choices()[key]
    assert named in choices.choices and choices.flag in text
    build_spec(SLICE, [f"{key}={named}"])  # an allowed value builds


def test_extra_args_unknown_flag_is_an_error_naming_the_nearest() -> None:
    spec = build_spec(SLICE, ["run.extra_args=--rollout-batchsize 8 --use-kl-loss"])
    (h13,) = [f for f in check(spec) if f.rule == "H13"]
    assert h13.severity == "error" and "--rollout-batchsize" in h13.message
    assert "--rollout-batch-size" in h13.message  # the nearest flag miles has


def test_extra_args_bad_choice_and_bad_type_are_errors() -> None:
    spec = build_spec(SLICE, ["run.extra_args=--kl-loss-type k4 --n-samples-per-eval-prompt many"])
    messages = [f.message for f in check(spec) if f.rule == "H13"]
    assert len(messages) == 2
    assert "'k4'" in messages[0] and "low_var_kl" in messages[0]
    assert "'many'" in messages[1] and "int" in messages[1]


def test_extra_args_known_flags_values_and_switches_pass() -> None:
    text = "--use-kl-loss --kl-loss-type k3 --moe-router-load-balancing-type aux_loss none --seed=7"
    assert miles_flags.extra_args_problems(text.split()) == []
    assert "H13" not in rules(build_spec(SLICE, [f"run.extra_args={text}"]))
    assert miles_flags.extra_args_problems(["--use-kl-loss=1"]) == [
        "--use-kl-loss is a switch and takes no value (got '1')"
    ]
    assert miles_flags.extra_args_problems(["--seed"]) == ["--seed expects 1 value"]


def test_extra_args_repeating_a_plan_flag_is_a_warning() -> None:
    spec = build_spec(SLICE, ["run.extra_args=--global-batch-size 64"])
    (h14,) = [f for f in check(spec) if f.rule == "H14"]
    assert h14.severity == "warning" and "'--global-batch-size'" in h14.message


# ------------------------------------------------------------------ 6 plans miles silently ran differently


def test_micro_batch_under_dynamic_batch_size_is_shown_as_1() -> None:
    spec = build_spec(FULL, ["train.micro_batch_size=2"])
    (h15,) = [f for f in check(spec) if f.rule == "H15"]
    assert h15.severity == "warning" and "micro batch 2 → 1" in h15.message
    assert "--micro-batch-size" not in argv(spec)


def test_micro_batch_2_global_132_is_no_false_reject_under_dynamic_batch_size() -> None:
    spec = build_spec(FULL, ["train.micro_batch_size=2", "batch.global_batch_size=132"])  # DP 4
    assert layout_figures(spec).training.dp == 4
    assert "C8" not in rules(spec)
    static = build_spec(FULL, ["train.micro_batch_size=2", "batch.global_batch_size=132"])
    static.train.use_dynamic_batch_size = False  # then Megatron gets 2 and 132 % (2 × 4) != 0
    assert "C8" in rules(static, "error")


def test_flex_dispatcher_reaches_the_argv() -> None:
    tokens = argv(build_spec(FULL, ["train.moe_token_dispatcher=flex"]))
    i = tokens.index("--moe-token-dispatcher-type")
    assert tokens[i + 1] == "flex"
    assert "--moe-token-dispatcher-type" not in argv(build_spec(FULL))  # alltoall: miles' own result


def test_shared_expert_overlap_reaches_the_argv() -> None:
    assert "--moe-shared-expert-overlap" in argv(build_spec(SLICE, ["train.moe_shared_expert_overlap=true"]))
    assert "--moe-shared-expert-overlap" not in argv(build_spec(SLICE))


def test_gpus_per_node_reaches_miles_rollout_placement() -> None:
    spec = build_spec(SLICE, ["cluster.gpus_per_node=4", "cluster.nodes=2", "rollout.gpus_per_engine=8"])
    tokens = argv(spec)
    assert tokens[tokens.index("--num-gpus-per-node") + 1] == "4"
    assert "--num-gpus-per-node" not in argv(build_spec(SLICE))  # 8: miles' default, the launcher's argv


def test_engines_and_nodes_per_engine_are_what_miles_places_on_4_gpu_nodes() -> None:
    spec = build_spec(SLICE, ["cluster.gpus_per_node=4", "cluster.nodes=2", "rollout.gpus_per_engine=8"])
    rollout = layout_figures(spec).rollout
    # miles with --num-gpus-per-node 4: 8 // min(8, 4) = 2 processes, one 2-node engine
    assert (rollout.engine_processes, rollout.nodes_per_engine, rollout.engines) == (2, 2, 1)


# ------------------------------------------------------------------ derived numbers as miles computes them


def test_a_partial_extra_engine_is_counted_like_miles() -> None:
    spec = build_spec(SLICE, ["cluster.gpus_per_node=4", "cluster.nodes=3", "rollout.gpus_per_engine=8"])
    rollout = layout_figures(spec).rollout
    # 12 GPUs: 3 processes of 4 GPUs; engines are every 2nd process, the last one partial
    assert (rollout.engine_processes, rollout.engines) == (3, 2)


def test_optimizer_steps_follow_miles_global_batch() -> None:
    spec = build_spec(SLICE, ["batch.num_steps_per_rollout=3", "batch.global_batch_size=85"])
    assert layout_figures(spec).batch.optimizer_steps_per_rollout == 3  # 256 // (256 // 3)
    spec = build_spec(SLICE, ["batch.global_batch_size=96"])
    assert layout_figures(spec).batch.optimizer_steps_per_rollout == 2  # 256 trimmed to 192


def test_sgd_state_is_not_sharded_since_miles_turns_the_distributed_optimizer_off() -> None:
    adam = layout_figures(build_spec(FULL)).memory
    sgd = layout_figures(build_spec(FULL, ["optimizer.name=sgd"])).memory
    per_gpu = layout_figures(build_spec(FULL)).memory.params_per_gpu_max_b * 1e9
    assert sgd.optimizer_gb_per_gpu == pytest.approx(per_gpu * 8 / 1e9, rel=1e-3)
    assert sgd.optimizer_gb_per_gpu > adam.optimizer_gb_per_gpu * 8 / 12  # DP 4 no longer divides it


# ------------------------------------------------------------------ the data itself


def test_every_flag_the_plan_emits_is_one_miles_knows() -> None:
    table = miles_flags.flag_table().flags
    sets = [
        "eval.enabled=true",
        "run.miles_dashboard=true",
        "train.moe_token_dispatcher=flex",
        "train.moe_shared_expert_overlap=true",
        "train.use_dynamic_batch_size=false",
        "cluster.gpus_per_node=4",
        "batch.num_steps_per_rollout=2",
        "batch.over_sampling_batch_size=64",
        "rollout.sglang_attention_backend=fa3",
        "train.vpp=2",
    ]
    for preset in (FULL, SLICE):
        tokens = train_argv(build_spec(preset, sets), "r", wandb=True)
        unknown = [t for t in tokens if t.startswith("--") and t not in table]
        assert unknown == []


def test_spec_literals_and_defaults_are_miles_sets() -> None:
    choices = miles_flags.spec_choices()
    for path, entry in choices.items():
        section, name = path.split(".")
        field = RunSpec.model_fields[section].annotation.model_fields[name]  # type: ignore[union-attr]
        literal = [a for a in typing.get_args(field.annotation) if isinstance(a, str)]
        assert set(literal) <= set(entry.choices), path  # a Literal field is a subset of miles' set
        assert field.default is None or field.default in entry.choices, path
        assert entry.source.count(":") == 1 and entry.choices
    flags = miles_flags.flag_table().flags
    assert flags["--num-gpus-per-node"].default == MILES_GPUS_PER_NODE
    assert flags["--moe-token-dispatcher-type"].default == "allgather"  # what miles turns into alltoall
    assert flags["--micro-batch-size"].default == 1


@pytest.mark.skipif(not MILES_GIT.is_dir(), reason="no miles checkout (set MILES_GIT to a miles git dir)")
def test_argument_data_matches_the_miles_checkout() -> None:
    source = miles_flags.recorded_source()
    commit = source["miles"].rsplit("@", 1)[1]
    text = subprocess.run(
        ["git", f"--git-dir={MILES_GIT}", "show", f"{commit}:{source['arguments_file']}"],
        capture_output=True,
        check=True,
    ).stdout
    assert hashlib.sha256(text).hexdigest() == source["arguments_sha256"]
    # every miles flag recorded from miles/utils/arguments.py is declared there, on the line recorded
    lines = text.decode().splitlines()
    for flag in miles_flags.flag_table().flags.values():
        if flag.source.startswith("miles/utils/arguments.py:"):
            line = int(flag.source.rsplit(":", 1)[1])
            assert "add_argument" in lines[line - 1] or "reset_arg" in lines[line - 1], flag.name


def test_preflight_says_when_the_miles_checkout_differs(tmp_path: Path) -> None:
    assert miles_flags.arguments_differ(str(tmp_path)) is None  # no checkout there: nothing to compare
    (tmp_path / "miles" / "utils").mkdir(parents=True)
    (tmp_path / "miles" / "utils" / "arguments.py").write_text("# another miles\n")
    why = miles_flags.arguments_differ(str(tmp_path))
    assert why is not None and miles_flags.recorded_source()["miles"] in why


def test_fixes_converge_on_one_tp_that_clears_every_finding() -> None:
    spec = build_spec(FULL, ["train.tp=3", "cluster.nodes=4"])  # 32 GPUs, PP 4
    tp_findings = [f for f in check(spec) if f.severity == "error" and "train.tp" in f.fields]
    assert {f.rule for f in tp_findings} >= {"A1", "B1", "D1", "D2"}
    (a1,) = [f for f in tp_findings if f.rule == "A1"]
    assert "cluster of" not in a1.fix and "train.tp" in a1.fix  # no node count: TP 3 stays illegal anyway
    for value in (4, 8):
        assert f"{value}" in a1.fix
        fixed = build_spec(FULL, ["train.tp=3", "cluster.nodes=4", f"train.tp={value}"])
        assert not {"A1", "B1", "B2", "D1", "D2"} & rules(fixed, "error")


def test_extra_args_check_is_bounded_and_linear() -> None:
    many = ["--no-such-flag", "v"] * 50_000 + ["stray"] * 50_000
    problems = miles_flags.extra_args_problems(many)
    assert len(problems) == miles_flags.MAX_PROBLEMS  # the nearest flag is looked up a few times, not 50k
    assert miles_flags.extra_args_problems(["--seed", "1"] * 50_000) == []  # each token looked at once
