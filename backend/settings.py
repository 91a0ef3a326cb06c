"""Operator settings: a TOML file plus environment, validated by pydantic.

Precedence (highest first): CLI flags, environment, config file, defaults. The file lives at
$ULTRA_CONSOLE_CONFIG or ~/.config/ultra-console/config.toml; state (audit log, log spools) under
$ULTRA_CONSOLE_STATE_DIR or $XDG_STATE_HOME/ultra-console.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from backend.errors import SpecError
from backend.notify_settings import NotifySettings
from backend.redaction import check_token, remember, shown_url, url_password
from backend.toml_input import read_toml_file

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
TerminalNotify = Literal["auto", "osc9", "osc777", "bell", "off"]  # console/terminal_alerts.py


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


class Settings(BaseModel):
    """Everything the console reads from the operator's environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # read by every room, changed by none

    address: str = DEFAULT_ADDRESS
    token: SecretStr | None = None
    readonly: bool = False
    state_dir: Path = Field(default_factory=lambda: _xdg("XDG_STATE_HOME", ".local/state") / "ultra-console")
    preset: str = "nemotron-3-ultra-550b-a55b"
    # binding id -> key(s), e.g. {"launch": "L", "abort": "A"}: remaps the app's keys.
    keys: dict[str, str] = Field(default_factory=dict)
    poll_interval_s: float = Field(default=1.0, ge=0.5, le=60.0)
    # The console's GPU probe (backend.cluster.gpu_probe): NVML once a second on every node, shared by
    # consoles; it ends this long after the last console
    # stopped renewing its lease (SIGKILL, lost SSH session).
    gpu_probe: bool = True
    gpu_probe_lease_timeout_s: float = Field(default=45.0, ge=3.0, le=60.0)
    # The run's watcher (backend.cluster.watcher): webhook channels it sends alerts, incidents and the cause
    # of death to while no console is open (`[notify]`, `[[notify.channels]]`).
    notify: NotifySettings = Field(default_factory=NotifySettings)
    # Start the run's watcher with every launch and on attach (a --readonly console never does);
    # `ULTRA_CONSOLE_WATCHER=0` or `watcher = false` turns it off.
    watcher: bool = True
    # A critical alert or a run's death rings the terminal's bell and sends a desktop notification (OSC 9,
    # or OSC 777 where the terminal speaks that; passed through tmux): "auto", "osc9", "osc777", "bell"
    # (the bell only) or "off".
    terminal_notify: TerminalNotify = "auto"

    def token_text(self) -> str | None:
        """The dashboard token as the client sends it (None: no token configured)."""
        return self.token.get_secret_value() if self.token is not None else None


def check_address(address: str) -> None:
    """An http(s) URL with a host and, if any, a numeric port; else one line (its password hidden)."""
    try:
        url = urlsplit(address)
        url.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError as err:
        raise SpecError(f"bad dashboard address {shown_url(address)!r}: {err}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise SpecError(f"bad dashboard address {shown_url(address)!r}: want http://HOST:PORT")


def config_path() -> Path:
    return Path(
        os.environ.get("ULTRA_CONSOLE_CONFIG")
        or _xdg("XDG_CONFIG_HOME", ".config") / "ultra-console/config.toml"
    )


ENVIRONMENT = {  # setting -> the environment variable that sets it
    "address": "RAY_ADDRESS",
    "token": "RAY_AUTH_TOKEN",
    "state_dir": "ULTRA_CONSOLE_STATE_DIR",
    "gpu_probe": "ULTRA_CONSOLE_GPU_PROBE",
    "watcher": "ULTRA_CONSOLE_WATCHER",
}


def load_settings(**overrides: Any) -> Settings:
    """File, then environment, then non-None `overrides` (the CLI flags)."""
    data: dict[str, Any] = {}
    path = config_path()
    if path.exists():  # a FIFO or device there is refused by its type, never opened (it would block)
        data = read_toml_file(path, "config file")
    data.update({k: os.environ[name] for k, name in ENVIRONMENT.items() if os.environ.get(name)})
    data.update({k: v for k, v in overrides.items() if v is not None})
    if "address" in data and "://" not in str(data["address"]):
        data["address"] = f"http://{data['address']}"
    _check_secrets(data)
    return _validated(data, path)


def _check_secrets(data: dict[str, Any]) -> None:
    """Remember the token and the address's password for redaction, then refuse bad ones."""
    token = data.get("token")
    remember(str(token) if token is not None else None, url_password(str(data.get("address") or "")))
    check_token(str(token) if token is not None else None)
    if "address" in data:
        check_address(str(data["address"]))


def _validated(data: dict[str, Any], path: Path) -> Settings:
    """The settings, or one line naming the first bad one."""
    try:
        return Settings(**data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"bad setting {where!r} in {path} or environment: {first['msg']}") from None
