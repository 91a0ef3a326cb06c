"""Where a run's watcher sends word while nobody watches: webhook channels, as pydantic settings.

Its own module (below every room) because the operator's config file (`[notify]`, backend.settings), a
per-launch file (`launch --notify FILE`) and the watcher job on the head (backend.cluster.watcher_job) all
read the same models. A channel's URL is a secret (a Slack or ntfy URL is the credential itself): it is a
`SecretStr`, remembered for redaction the moment it is read, and it travels to the watcher only inside a 0600
file, never on a command line, in a preview, the audit log or a message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from backend.errors import SpecError
from backend.redaction import remember
from backend.severity import Severity
from backend.toml_input import read_toml_file

ChannelKind = Literal["json", "slack", "ntfy"]


class WebhookChannel(BaseModel):
    """One webhook: `json` (our own object), `slack` (`{"text": …, "blocks": […]}`), `ntfy` (text body,
    Title/Priority/Tags headers). `min_severity`: the least severe message it gets; `alerts`: the alert ids it
    gets (empty: every one; a run's cause and end pass whatever the list says)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="webhook", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: ChannelKind = "json"
    url: SecretStr
    min_severity: Severity = Severity.WARNING
    alerts: tuple[str, ...] = ()

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: SecretStr) -> SecretStr:
        text = value.get_secret_value()
        remember(text)  # from here on redacted from every line, whatever fails below
        try:
            url = urlsplit(text)
        except ValueError:
            raise ValueError("a webhook url must be http(s)://HOST/…") from None
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError("a webhook url must be http(s)://HOST/…")  # the message names no part of it
        return value

    def admits(self, severity: Severity, alert_id: str | None) -> bool:
        """Whether a message of `severity` about `alert_id` (None: a run's cause or end) goes here."""
        if severity.rank > self.min_severity.rank:
            return False
        return alert_id is None or not self.alerts or alert_id in self.alerts


class NotifySettings(BaseModel):
    """The channels and how they are paced: an alert's clear is sent once it has stayed clear `clear_hold_s`
    (a flapping alert is one fire and one clear); an incident (a failure the catalog names) waits
    `incident_hold_s`, so a run that dies of it gets one cause message, not a warning per consequence; each
    channel sends at most `rate_per_min` messages, holds at most `queue_size`, retries `retries` times with
    backoff, each attempt bounded by `timeout_s`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channels: tuple[WebhookChannel, ...] = ()
    clear_hold_s: float = Field(default=30.0, ge=0.0, le=3600.0)
    incident_hold_s: float = Field(default=10.0, ge=0.0, le=600.0)
    rate_per_min: int = Field(default=20, ge=1, le=600)
    queue_size: int = Field(default=100, ge=1, le=10_000)
    retries: int = Field(default=3, ge=0, le=10)
    timeout_s: float = Field(default=10.0, gt=0.0, le=120.0)
    backoff_s: float = Field(default=1.0, ge=0.0, le=60.0)


def load_notify_file(path: Path) -> NotifySettings:
    """A launch's own notification settings (`launch --notify FILE`): a TOML file holding what the config
    file's `[notify]` holds, at its top level or under `[notify]`; bad input is one line naming no URL."""
    data = read_toml_file(path, "notify file")
    table = data.get("notify", data)
    try:
        return NotifySettings.model_validate(table)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"bad notify setting {where!r} in {path}: {first['msg']}") from None
