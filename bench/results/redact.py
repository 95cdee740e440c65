"""Passwords never leave the process: URLs and command lines are redacted before output."""

from __future__ import annotations

import re

import lockimpls.urls

_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")
_DSN_PASSWORD = re.compile(r"(?i)\bpassword\s*=\s*('[^']*'|\S+)")


def redact_url(url: str) -> str:
    """redis://user:secret@host:1/0 -> redis://user:***@host:1/0; libpq ``password=`` too."""
    return redact_text(lockimpls.urls.redact_url(url))


def redact_text(text: str) -> str:
    """Redact every URL password and ``password=...`` in free text (a command line, a log)."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    return _DSN_PASSWORD.sub("password=***", text)
