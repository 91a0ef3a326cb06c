"""Hostile input, round 3 (issue 36), secrets in `run.extra_args`: the command line is shown in `plan`'s
preview, in `ps` on every node and in Ray's job metadata (the spec), so a flag that names a secret or a
value shaped like an access token is refused in one line that repeats no part of it (only `--wandb-key`
was before)."""

from __future__ import annotations

import pytest

from backend.errors import ConsoleError
from backend.plan.submission import split_extra_args
from console.cli import main

HF = "hf_" + "a1B2c3D4e5" * 3


@pytest.mark.parametrize(
    "extra",
    [
        f"--hf-token {HF}",
        "--api-key=plain-words-but-a-key",
        "--password hunter2",
        "--sglang-api-key=abc",
        "--client-secret s3cr3tval",
        f"--note {HF}",  # a token's shape under any flag
        "--x sk-" + "Z" * 30,
    ],
)
def test_a_secret_in_extra_args_is_refused_naming_no_part_of_it(extra: str) -> None:
    with pytest.raises(ConsoleError) as err:
        split_extra_args(extra)
    value = extra.replace("=", " ").split()[-1]
    assert value not in str(err.value) and "\n" not in str(err.value)


def test_flags_that_only_mention_tokens_or_keys_still_pass() -> None:
    text = "--max-tokens-per-gpu 1024 --input-key prompt --label-key label --tokenizer-type x"
    text += " --skip-special-tokens --sglang-max-total-tokens 9"
    assert split_extra_args(text)[0] == "--max-tokens-per-gpu"


def test_plan_with_a_token_in_extra_args_is_one_line_and_never_previews_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["plan", "--set", f"run.extra_args=--hf-token {HF}"])
    out, err = capsys.readouterr()
    assert code == 1 and HF not in out + err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
