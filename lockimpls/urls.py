"""URL passwords never reach a message: one redactor for every lock client and for bench."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (userinfo and ``password=`` query)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}{':***' if sep else ''}@{hostport}"
    query = parts.query
    if "password=" in query:
        query = urlencode([(k, "***" if k == "password" else v) for k, v in parse_qsl(query)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
