"""No secret reaches the operator's screen, a notice or a saved file: the one redaction helper at the
error boundary.

The secrets of a session (the dashboard token, a password in the dashboard URL) are remembered where the
settings are read and where a client is made; `redact` then replaces them wherever they turn up, as typed
or as a library's repr of them (`Illegal header value b'Bearer …'`), and `public_line` is what every
message from elsewhere goes through on its way out: secrets redacted, escape sequences and controls
removed (backend.sanitize), one line. A token a header cannot carry is refused before any request, by a
message that names no part of it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from backend.errors import ConsoleError
from backend.sanitize import one_line, sanitize_text

REDACTED = "***"
MIN_SECRET = 4  # shorter values would redact ordinary words; URL and Bearer patterns still catch them
_known: set[str] = set()
# `scheme://user:password@` and `Bearer <token>` wherever they appear, whoever's they are.
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]*:)[^/@\s]*@")
_BEARER = re.compile(r"(\bBearer\s+)[^\s'\"]+", re.IGNORECASE)
# A flag or variable whose name says it holds a secret (`--wandb-key`, `WANDB_API_KEY`, `hf_token`).
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)


class BadToken(ConsoleError):
    """The token holds a character an HTTP header cannot carry."""


def remember(*secrets: str | None) -> None:
    """Secrets of this session, redacted from every message from now on."""
    for secret in secrets:
        if secret:
            _known.update(v for v in (secret, secret.strip(), repr(secret)[1:-1]) if len(v) >= MIN_SECRET)


def url_password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def shown_url(url: str) -> str:
    """The URL with its password (if any) replaced: fit for a message."""
    return _URL_PASSWORD.sub(rf"\1{REDACTED}@", url)


def redact(text: str) -> str:
    """`text` with every remembered secret, URL password and Bearer token replaced by ***."""
    for secret in sorted(_known, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _BEARER.sub(rf"\1{REDACTED}", shown_url(text))


def shown_value(name: str, value: str) -> str:
    """A flag's or variable's value fit to show: *** when its name says secret, else redacted and one line."""
    return REDACTED if SECRET_NAME.search(name) else public_line(value)


def public_text(text: str) -> str:
    """Text from elsewhere, several lines allowed, fit for a terminal or a file: redacted and sanitised."""
    return sanitize_text(redact(text))


def public_line(text: str) -> str:
    """A message from elsewhere (an error, a notice) as one clean line: redacted, sanitised, one line."""
    return one_line(redact(text))


def check_token(token: str | None) -> None:
    """Refuse a token an HTTP header cannot carry (a pasted `\\r`, a space, a control character)."""
    if not token:
        return
    bad = next((i for i, c in enumerate(token) if not 0x21 <= ord(c) <= 0x7E), None)
    if bad is not None:
        where = "ends with" if bad >= len(token.rstrip()) else "holds"
        raise BadToken(
            f"the Ray auth token {where} a space or control character (at position {bad + 1} of "
            f"{len(token)}), which an HTTP header cannot carry; check --token / RAY_AUTH_TOKEN"
        )
