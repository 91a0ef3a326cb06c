"""Run subcommands without a cluster: bad input, read-only and an unreachable dashboard are one
clear line and a non-zero exit, never a traceback (in-process, nothing listens on port 1)."""

from __future__ import annotations

import pytest

from console.cli import main

DEAD = "http://127.0.0.1:1"


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ULTRA_CONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ULTRA_CONSOLE_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["status"], "Ray dashboard unreachable at http://127.0.0.1:1"),
        (["nodes", "--json"], "Ray dashboard unreachable at http://127.0.0.1:1"),
        (["logs", "--follow"], "Ray dashboard unreachable at http://127.0.0.1:1"),
        (["abort", "--yes"], "Ray dashboard unreachable at http://127.0.0.1:1"),
        (["logs", "--tail", "-1"], "--tail must be 0 or more"),
        (["launch", "--set", "bogus=1", "--yes"], "unknown key 'bogus'"),
        (["--readonly", "launch", "--yes"], "launch refused: the console is read-only"),
        (["--readonly", "abort", "--yes"], "abort refused: the console is read-only"),
        (["--readonly", "cleanup", "--yes"], "cleanup refused: the console is read-only"),
    ],
)
def test_one_line_errors(argv: list[str], expected: str, capsys) -> None:
    code = main(["--address", DEAD, *argv])
    out, err = capsys.readouterr()
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in err, err
    assert out == ""


def test_address_from_environment(monkeypatch, capsys) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    assert main(["status"]) == 1
    assert "unreachable at http://127.0.0.1:1" in capsys.readouterr().err


def test_global_options_after_the_command_too(capsys) -> None:
    """`ultra-console status --address URL` as an operator types it (argparse alone refused it)."""
    from console.cli import parse

    assert main(["status", "--address", DEAD]) == 1
    assert "unreachable at http://127.0.0.1:1" in capsys.readouterr().err
    assert main(["launch", "--yes", "--readonly"]) == 1
    assert "launch refused: the console is read-only" in capsys.readouterr().err
    before = parse(["--address", "http://a:1", "--token", "t0", "status"])
    assert (before.address, before.token, before.readonly, before.job) == ("http://a:1", "t0", None, None)
    after = parse(["--address", "http://a:1", "--readonly", "status", "--address", "http://b:1"])
    assert (after.address, after.readonly) == ("http://b:1", True)  # given after the command, it wins


def test_a_token_given_after_the_command_is_redacted_too(capsys) -> None:
    secret = "tok-after-the-command-5e3f"
    assert main(["status", "--address", f"http://user:{secret}@127.0.0.1:1", "--token", secret]) == 1
    err = capsys.readouterr().err
    assert "unreachable" in err and secret not in err
