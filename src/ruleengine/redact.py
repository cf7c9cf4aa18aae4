"""Keep access tokens out of everything that is logged or stored.

Two layers: patterns that catch a token wherever Graph puts one (``access_token=``
in URLs and form bodies, JSON fields, ``Authorization`` headers, Meta's
``EAA…`` token shape), and the exact tokens the process has used, registered
as it resolves them. :class:`RedactingFilter` applies both to every log record.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any, Final

MASK: Final = "[REDACTED]"

_PATTERNS: Final = (
    # access_token=… in URLs, query strings and form bodies
    re.compile(r"(access_token=)[^&\s\"'#]+", re.IGNORECASE),
    # "access_token": "…" in JSON and Python reprs
    re.compile(r"""(["']access_token["']\s*:\s*["'])[^"']+""", re.IGNORECASE),
    # Authorization: Bearer … / OAuth …
    re.compile(r"((?:authorization)[\"']?\s*[:=]\s*[\"']?(?:bearer|oauth)\s+)[^\s\"',]+", re.I),
    # Meta user/system-user/page tokens all start with EAA
    re.compile(r"()\bEAA[A-Za-z0-9]{16,}"),
)


class Redactor:
    """Masks tokens in text and nested data; knows the patterns plus registered secrets."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = {s for s in secrets if len(s) >= 8}

    def register(self, secret: str) -> None:
        """Mask this exact string from now on (tokens are registered when resolved)."""
        if len(secret) >= 8:
            self._secrets.add(secret)

    def text(self, value: str) -> str:
        """``value`` with every token masked."""
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        for pattern in _PATTERNS:
            value = pattern.sub(lambda m: m.group(1) + MASK, value)
        return value

    def data(self, value: Any) -> Any:
        """A copy of nested dicts/lists/strings with tokens masked (keys named like tokens too)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: MASK if _is_secret_key(k) else self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value


def _is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and key.lower() in {"access_token", "authorization", "token"}


# The process-wide redactor: tokens resolved anywhere in the process are registered here
# so that the logging filter masks them even where no pattern would recognise them.
REDACTOR: Final = Redactor()


class RedactingFilter(logging.Filter):
    """A logging filter that masks tokens in the message and its arguments."""

    def __init__(self, redactor: Redactor = REDACTOR) -> None:
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        """Render the message once, mask it, and drop the arguments."""
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        record.msg = self._redactor.text(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redactor.text(record.exc_text)
        return True


def setup_logging(level: str = "INFO") -> None:
    """Log to stderr with token redaction on every record (call once per process)."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The arq CLI configures a handler of its own on "arq" before our settings are read; its
    # lines would be printed twice and bypass redaction. Let them go through the root handler.
    arq = logging.getLogger("arq")
    arq.handlers.clear()
    arq.propagate = True
    for noisy in ("aiohttp.access", "pymongo", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
