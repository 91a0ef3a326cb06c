"""`ultra-console plan`: the JSON contract other tools rely on, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from console.cli import main

SLICE = "nemotron-3-ultra-550b-a55b-4layer"


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("preset", [None, SLICE])
def test_presets_plan_ok_with_the_json_contract(
    capsys: pytest.CaptureFixture[str], preset: str | None
) -> None:
    code, out, _ = _plan(capsys, *(["--preset", preset] if preset else []), "--json")
    payload = json.loads(out)
    assert code == 0 and payload["ok"] is True
    assert set(payload) >= {"ok", "findings", "derived", "submission"}
    assert not [f for f in payload["findings"] if f["severity"] == "error"]
    for f in payload["findings"]:
        assert set(f) >= {"rule", "severity", "fields", "message", "fix"}
        assert f["severity"] in ("error", "warning", "info")
    sub = payload["submission"]
    assert set(sub) >= {"entrypoint", "argv", "runtime_env", "submission_id", "metadata"}
    assert sub["argv"][0] == "python3" and sub["argv"][1].endswith("/train.py")
    assert "env_vars" in sub["runtime_env"]


def test_error_finding_exits_2_and_names_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _plan(capsys, "--set", "train.tp=16", "--json")
    payload = json.loads(out)
    assert code == 2 and payload["ok"] is False
    errors = [f for f in payload["findings"] if f["severity"] == "error"]
    assert any(f["rule"] == "D2" and "train.tp" in f["fields"] for f in errors)
    d2 = next(f for f in errors if f["rule"] == "D2")
    assert "8" in d2["fix"]


def test_text_output_shows_findings_and_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _plan(capsys, "--preset", SLICE, "--set", "train.tp=3")
    assert code == 2
    assert "ERROR" in out and "ray job submit" in out and "fix:" in out


@pytest.mark.parametrize(
    "args",
    [
        ["--preset", "nope"],
        ["--set", "train.bogus=1"],
        ["--set", "train.tp=x"],
        ["--set", "noequals"],
        ["--set", "run.extra_args=--a 'open"],
    ],
)
def test_bad_input_exits_1_with_one_line(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code, out, err = _plan(capsys, *args, "--json")
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_console_script_runs_as_a_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "console.cli", "plan", "--preset", SLICE, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["submission"]["metadata"]["gpus"] == "8"


def test_wandb_key_from_environment_never_reaches_plan_output(monkeypatch, capsys) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "sekrit-wandb-value-42")
    _, out, _ = _plan(capsys, "--json")
    payload = json.loads(out)
    assert "--use-wandb" in payload["submission"]["argv"]
    assert payload["submission"]["runtime_env"]["env_vars"]["WANDB_API_KEY"] == "***"
    assert "sekrit-wandb-value-42" not in out
    _, text, _ = _plan(capsys)
    assert "sekrit-wandb-value-42" not in text and "--use-wandb" in text
