"""Operator settings: file, then environment, then CLI flags; bad values are one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.errors import SpecError
from backend.settings import DEFAULT_ADDRESS, load_settings


def test_precedence_file_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('address = "http://10.1.2.3:8265"\nreadonly = true\n[keys]\n"plan.launch" = "ctrl+l"\n')
    monkeypatch.setenv("ULTRA_CONSOLE_CONFIG", str(cfg))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    s = load_settings()
    assert s.address == "http://10.1.2.3:8265" and s.readonly and s.keys == {"plan.launch": "ctrl+l"}
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9999")
    assert load_settings().address == "http://127.0.0.1:9999"  # env beats file; scheme added
    assert load_settings(address="http://127.0.0.1:1").address == "http://127.0.0.1:1"  # flag beats env


def test_defaults_without_file_or_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ULTRA_CONSOLE_CONFIG", str(tmp_path / "missing.toml"))
    for var in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    s = load_settings()
    assert s.address == DEFAULT_ADDRESS and s.token is None and s.token_text() is None and not s.readonly


def test_token_from_env_is_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ULTRA_CONSOLE_CONFIG", str(tmp_path / "missing.toml"))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "tok-123456")
    s = load_settings()
    assert s.token is not None and s.token.get_secret_value() == "tok-123456" == s.token_text()
    assert "tok-123456" not in repr(s) and "tok-123456" not in str(s)
    assert "tok-123456" not in s.model_dump_json()


@pytest.mark.parametrize(
    "body", ['readonly = "maybe"\n', "bogus = 1\n", "poll_interval_s = 0.01\n", "[unclosed\n"]
)
def test_bad_config_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(body)
    monkeypatch.setenv("ULTRA_CONSOLE_CONFIG", str(cfg))
    with pytest.raises(SpecError) as err:
        load_settings()
    assert "\n" not in str(err.value) and str(cfg) in str(err.value)
