"""Operator settings: a TOML file plus environment, validated by pydantic.

Precedence (highest first): CLI flags, environment, config file, defaults. The file lives at
$ULTRA_CONSOLE_CONFIG or ~/.config/ultra-console/config.toml; state (audit log, log spools) under
$ULTRA_CONSOLE_STATE_DIR or $XDG_STATE_HOME/ultra-console.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from backend.errors import SpecError
from backend.redaction import check_token, remember, shown_url, url_password
from backend.regular_files import read_regular_text
from backend.toml_input import TOMLDecodeError, parse_toml

DEFAULT_ADDRESS = "http://127.0.0.1:8265"


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


def load_settings(**overrides: Any) -> Settings:
    """File, then environment, then non-None `overrides` (the CLI flags)."""
    data: dict[str, Any] = {}
    path = config_path()
    if path.exists():  # a FIFO or device there is refused by its type, never opened (it would block)
        try:
            data = parse_toml(read_regular_text(path, "config file"))
        except UnicodeDecodeError as err:
            raise SpecError(f"cannot read config file {path}: not UTF-8 text (byte {err.start})") from None
        except (OSError, TOMLDecodeError) as err:
            raise SpecError(f"cannot read config file {path}: {err}") from None
    env = {
        "address": os.environ.get("RAY_ADDRESS"),
        "token": os.environ.get("RAY_AUTH_TOKEN"),
        "state_dir": os.environ.get("ULTRA_CONSOLE_STATE_DIR"),
        "gpu_probe": os.environ.get("ULTRA_CONSOLE_GPU_PROBE"),
    }
    data.update({k: v for k, v in env.items() if v})
    data.update({k: v for k, v in overrides.items() if v is not None})
    if "address" in data and "://" not in str(data["address"]):
        data["address"] = f"http://{data['address']}"
    token = data.get("token")
    remember(str(token) if token is not None else None, url_password(str(data.get("address") or "")))
    check_token(str(token) if token is not None else None)
    if "address" in data:
        check_address(str(data["address"]))
    try:
        return Settings(**data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"bad setting {where!r} in {path} or environment: {first['msg']}") from None
