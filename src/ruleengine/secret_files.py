"""Secret files of the embedded set-up (``var/api-token``, ``var/token-encryption.key``):
readable by their owner only, from the moment they exist.

A file written and then ``chmod``-ed is readable by everyone between the two (umask 022
makes it 0644), and forever if the process dies in between. So a new secret is written to a
temporary file, which ``mkstemp`` creates 0600, and linked into place only once complete:
the name never shows a partial secret, and when two processes create it at once, the first
link wins and both read the same secret. An existing file that others may read is
tightened to 0600, or refused when this process cannot.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ruleengine.errors import ConfigurationError

log = logging.getLogger(__name__)

OWNER_ONLY: Final = 0o600


def read_secret(path: Path, *, create: Callable[[], bytes] | None = None) -> bytes:
    """The secret in ``path`` (surrounding whitespace stripped), tightened to 0600 first.

    Args:
        path: the file.
        create: makes the secret when the file does not exist yet (then it is created
            0600, whole); without it a missing file raises :class:`FileNotFoundError`.

    Raises:
        ConfigurationError: others may read the file and this process cannot change that.
    """
    if create is not None and not path.exists():
        _create(path, create())
    _tighten(path)
    return path.read_bytes().strip()


def _create(path: Path, secret: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # 0600
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(secret)
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first: keep that
            os.link(temporary, path)
    finally:
        os.unlink(temporary)


def _tighten(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & 0o077:
        return
    try:
        path.chmod(OWNER_ONLY)
    except PermissionError:
        raise ConfigurationError(
            f"{path} may be read by others (mode {mode:04o}) and this process cannot change"
            f" that: run `chmod 600 {path}` as its owner"
        ) from None
    log.warning("%s could be read by others (mode %04o): made it 0600", path, mode)
