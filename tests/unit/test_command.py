"""The submission: golden argv against miles' launcher, runtime env, secrets, extra_args safety."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from backend.errors import SpecError
from backend.plan.run_id import new_run_id
from backend.plan.spec import build_spec
from backend.plan.submission import build_submission, redact, split_extra_args

GOLDEN = Path(__file__).parents[1] / "golden"
SLICE = "nemotron-3-ultra-550b-a55b-4layer"
CASES = {
    "seed_launcher_full_16x8.json": (None, []),
    "seed_launcher_4layer_1x8.json": (SLICE, []),
    "seed_launcher_4layer_1x8_debug.json": (SLICE, ["run.mode=debug_minimal"]),
}


def _recorded(name: str) -> tuple[list[str], dict[str, str]]:
    submit = json.loads((GOLDEN / name).read_text())[-1]
    argv = submit.split(" -- python3 <miles>/train.py ", 1)[1].split()
    env = json.loads(submit.split("--runtime-env-json='", 1)[1].split("'", 1)[0])["env_vars"]
    return argv, env


@pytest.mark.parametrize("name", sorted(CASES))
def test_argv_matches_seed_launcher_token_for_token(name: str) -> None:
    preset, overrides = CASES[name]
    spec = build_spec(preset, [*overrides, "paths.miles_root=<miles>"])
    sub = build_submission(spec, run_id="fixed-run", nvlink=False, with_shim=False)
    recorded_argv, _ = _recorded(name)
    assert sub.argv[:2] == ["python3", "<miles>/train.py"]
    assert sub.argv[2:] == recorded_argv
    assert shlex.split(sub.entrypoint) == sub.argv


@pytest.mark.parametrize("name", sorted(CASES))
def test_runtime_env_contains_launcher_env_plus_graceful_stop(name: str) -> None:
    preset, overrides = CASES[name]
    spec = build_spec(preset, [*overrides, "paths.miles_root=<miles>"])
    env = build_submission(spec, run_id="fixed-run", nvlink=False, with_shim=False).runtime_env["env_vars"]
    _, recorded_env = _recorded(name)
    assert {k: env[k] for k in recorded_env} == recorded_env
    assert env["RAY_JOB_STOP_SIGNAL"] == "SIGINT"
    assert int(env["RAY_JOB_STOP_WAIT_TIME_S"]) == spec.run.stop_wait_s
    assert re.match(
        env["RAY_DEDUP_LOGS_ALLOW_REGEX"], "ultra-console shim: applied NemotronH provider fields {}"
    )


def test_full_model_has_163_tokens_and_sequence_parallel() -> None:
    sub = build_submission(build_spec(), run_id="r", nvlink=True, with_shim=False)
    assert len(sub.argv) == 163
    assert "--sequence-parallel" in sub.argv
    assert sub.runtime_env["env_vars"]["NCCL_NVLS_ENABLE"] == "1"


def test_slice_has_no_sequence_parallel_and_debug_mode_shortens_responses() -> None:
    sub = build_submission(build_spec(SLICE, ["run.mode=debug_minimal"]), run_id="r", with_shim=False)
    assert "--sequence-parallel" not in sub.argv
    i = sub.argv.index("--rollout-max-response-len")
    assert sub.argv[i + 1] == "256"


def test_wandb_key_travels_only_in_runtime_env_and_is_redacted() -> None:
    key = "wandb-secret-0123456789abcdef"
    spec = build_spec(None, [])
    sub = build_submission(spec, run_id="r1", secrets={"WANDB_API_KEY": key}, with_shim=False)
    assert key not in sub.entrypoint and all(key not in a for a in sub.argv)
    assert "--use-wandb" in sub.argv and "--wandb-key" not in sub.argv
    assert sub.runtime_env["env_vars"]["WANDB_API_KEY"] == key
    assert key not in sub.shell("http://127.0.0.1:8265")
    assert key not in json.dumps(sub.redacted_payload())
    assert "***" in sub.shell()


def test_no_wandb_flags_without_a_key() -> None:
    sub = build_submission(build_spec(), run_id="r1", with_shim=False)
    assert not any(a.startswith("--wandb") or a == "--use-wandb" for a in sub.argv)


@pytest.mark.parametrize(
    "hostile", ["; rm -rf /", "$(reboot)", "`id`", "a && b", "x | y > /etc/passwd", "'q' \"z\""]
)
def test_extra_args_cannot_inject_shell_syntax(hostile: str) -> None:
    spec = build_spec(None, [f"run.extra_args=--foo {shlex.quote(hostile)}"])
    sub = build_submission(spec, run_id="r", with_shim=False)
    assert sub.argv[-2:] == ["--foo", hostile]
    # the entrypoint, parsed by a POSIX shell, yields exactly the argv: the hostile text stays one word
    assert shlex.split(sub.entrypoint) == sub.argv


def test_extra_args_split_like_a_shell_and_append_last() -> None:
    spec = build_spec(None, ["run.extra_args=\"--use-miles-dashboard --note 'two words'\""])
    sub = build_submission(spec, run_id="r", with_shim=False)
    assert sub.argv[-3:] == ["--use-miles-dashboard", "--note", "two words"]


@pytest.mark.parametrize("bad", ["--x 'unbalanced", "--wandb-key abc", "--wandb-key=abc"])
def test_bad_extra_args_are_refused_with_one_line(bad: str) -> None:
    with pytest.raises(SpecError) as err:
        split_extra_args(bad)
    assert "\n" not in str(err.value)


def test_submission_id_and_metadata_from_run_id() -> None:
    sub = build_submission(build_spec(), run_id="261130-060000-123", with_shim=False)
    assert sub.submission_id == "ultra-console-261130-060000-123"
    assert sub.metadata["run_id"] == "261130-060000-123"
    assert all(isinstance(v, str) for v in sub.metadata.values())
    assert "--save" in sub.argv and "/root/shared_data/261130-060000-123/checkpoints" in sub.argv


def test_run_ids_look_like_miles_and_differ() -> None:
    a = new_run_id()
    assert len(a) == 17 and a[6] == "-" and a[13] == "-"


def test_train_script_override_replaces_train_py() -> None:
    sub = build_submission(
        build_spec(SLICE, ["paths.train_script=/opt/sim/train.py"]), run_id="r", with_shim=False
    )
    assert sub.argv[1] == "/opt/sim/train.py"
    assert sub.metadata["train_script"] == "/opt/sim/train.py"
    assert "simulated" not in sub.metadata


def test_simulated_trainer_runs_are_labelled() -> None:
    from backend.demo.simtrainer import SIM_TRAIN_SCRIPT

    sub = build_submission(
        build_spec(SLICE, [f"paths.train_script={SIM_TRAIN_SCRIPT}"]), run_id="r", with_shim=False
    )
    assert sub.argv[1] == SIM_TRAIN_SCRIPT and sub.metadata["simulated"] == "1"


def test_skip_saving_drops_save_flags() -> None:
    sub = build_submission(build_spec(SLICE, ["checkpoint.skip_saving=true"]), run_id="r", with_shim=False)
    assert "--save" not in sub.argv and "--save-interval" not in sub.argv


def test_eval_flags_when_enabled() -> None:
    sub = build_submission(build_spec(SLICE, ["eval.enabled=true"]), run_id="r", with_shim=False)
    i = sub.argv.index("--eval-prompt-data")
    assert sub.argv[i + 1 : i + 3] == ["aime", "/root/datasets/aime-2024/aime-2024.jsonl"]


def test_redact_free_text() -> None:
    assert redact("x --wandb-key abc y", {}) == "x --wandb-key *** y"
    assert redact("token=s3cr3t", {"T": "s3cr3t"}) == "token=***"


def test_megatron_and_sglang_attention_backends_are_separate_flags() -> None:
    sub = build_submission(
        build_spec(SLICE, ["train.attention_backend=flash", "rollout.sglang_attention_backend=fa3"]),
        run_id="r",
        with_shim=False,
    )
    assert sub.argv[sub.argv.index("--attention-backend") + 1] == "flash"
    assert sub.argv[sub.argv.index("--sglang-attention-backend") + 1] == "fa3"
    plain = build_submission(build_spec(SLICE), run_id="r", with_shim=False)
    assert "--sglang-attention-backend" not in plain.argv


def test_runtime_env_carries_the_flight_recorder() -> None:
    spec = build_spec(SLICE, ["paths.output_dir=/out"])
    env = build_submission(spec, run_id="fixed-run", nvlink=False, with_shim=False).runtime_env["env_vars"]
    assert {k: v for k, v in env.items() if k.startswith("TORCH_")} == {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": "/out/fixed-run/flight_recorder/rank_",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/out/fixed-run/flight_recorder/pipe_rank_",
        "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "30000",
    }
    preview = build_submission(spec, run_id="fixed-run", nvlink=False, with_shim=False).shell()
    assert '"TORCH_FR_DUMP_TEMP_FILE":"/out/fixed-run/flight_recorder/rank_"' in preview
    assert '"TORCH_NCCL_DUMP_ON_TIMEOUT":"1"' in preview
