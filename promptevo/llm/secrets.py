"""Secrets are never written to results, logs or error lines: redaction of keys and URL credentials."""

from __future__ import annotations

import os
import re
from urllib.parse import urlparse

#: Environment variables whose values are treated as secrets by :func:`redact` (by name suffix/part).
_SECRET_ENV_RE = re.compile(r"(API_KEY|_KEY|TOKEN|SECRET|PASSWORD|PASSWD)", re.IGNORECASE)
_SECRET_QUERY_RE = re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access_token|secret|password|sig)=)[^&#\s]*")
_URL_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")
_MIN_SECRET_LEN = 6


def redact_url(url: str | None) -> str | None:
    """``url`` with its userinfo (``user:pass@``) and secret query parameters replaced by ``***``."""
    if not url:
        return url
    out = _URL_USERINFO_RE.sub(r"\1***@", str(url))
    return _SECRET_QUERY_RE.sub(r"\1***", out)


def url_secrets(url: str | None) -> list[str]:
    if not url:
        return []
    try:
        parsed = urlparse(url if "://" in url else f"http://{url}")
    except ValueError:
        return []
    return [x for x in (parsed.password, parsed.username if len(parsed.username or "") >= 8 else None) if x]


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with the given secrets, every ``*_API_KEY``/``*TOKEN``/``*SECRET``/``*PASSWORD``
    environment variable value, URL userinfo and secret query parameters replaced by ``***``."""
    if not text:
        return text
    values = {v for v in secrets if v and len(v) >= 3}
    values |= {v for k, v in os.environ.items() if v and len(v) >= _MIN_SECRET_LEN and _SECRET_ENV_RE.search(k)}
    for v in sorted(values, key=len, reverse=True):
        if v in text:
            text = text.replace(v, "***")
    return redact_url(text) or text


