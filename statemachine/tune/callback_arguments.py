"""The checks of ``EventLogCallback``'s arguments, made when the callback is constructed.

An argument that can never work (a database the log does not support, a storage URI given
as the log's URL, a folder, a timeout that is not a whole number of milliseconds) would
otherwise fail only at the first trial, after Ray started, with the run going on unrecorded.
Each is a :class:`~statemachine.exceptions.ConfigurationError` here: one line naming the
argument, what it got and the fix. Which URLs are databases, and which storage, is decided
by :mod:`statemachine.log.dialect` and :mod:`statemachine.log.remote`; this module only
applies those rules to the callback's arguments.
"""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any

from statemachine.domain.policy import RetryPolicy
from statemachine.exceptions import ConfigurationError
from statemachine.log.credentials import describe_url, redact_uri
from statemachine.log.dialect import backend_for, database_file
from statemachine.log.engine import to_url
from statemachine.log.remote import is_storage_uri
from statemachine.log_location import DEFAULT_LOG_FILENAME

__all__ = ["MAX_BUSY_TIMEOUT_MS", "check_busy_timeout", "check_flag", "check_policy",
           "checked_url"]

#: The largest busy timeout SQLite takes (a C int of milliseconds: about 24.9 days).
MAX_BUSY_TIMEOUT_MS = 2**31 - 1

_URL_FORMS = "sqlite:///path/to/log.db, a .db file path, or postgresql://user@host/db"


def _shown(value: Any) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def checked_url(url: Any) -> str | None:
    """``url`` as the text the callback keeps (a path-like as its path); a
    :class:`ConfigurationError` for a URL or path that can never be the event log."""
    if url is None:
        return None
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        raise ConfigurationError(
            f"EventLogCallback(url={_shown(url)}): give the event log's database URL or file "
            f"path as text ({_URL_FORMS}), not {type(url).__name__}")
    if not url:
        return url  # the default log, as None
    shown = f"EventLogCallback(url={describe_url(url)!r})"
    if is_storage_uri(url):
        raise ConfigurationError(
            f"{shown}: that is cloud storage, not a database; leave url unset and give the "
            f"storage as RunConfig(storage_path={redact_uri(url)!r}): the log is then a "
            "SQLite file on the driver and a copy of it follows the experiment to its storage")
    try:
        backend_for(to_url(url))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{shown}: {exc}") from None
    path = database_file(to_url(url))
    if path is not None and path.is_dir():
        raise ConfigurationError(
            f"{shown}: {path} is a folder, not a database file; name the log file, for "
            f"example url={str(Path(path) / DEFAULT_LOG_FILENAME)!r}")
    return url


def check_busy_timeout(busy_timeout_ms: Any) -> None:
    """A :class:`ConfigurationError` unless ``busy_timeout_ms`` is ``None`` or a whole number
    of milliseconds SQLite can take (0 to :data:`MAX_BUSY_TIMEOUT_MS`)."""
    if busy_timeout_ms is None:
        return
    shown = f"EventLogCallback(busy_timeout_ms={_shown(busy_timeout_ms)})"
    wanted = f"a whole number of milliseconds from 0 to {MAX_BUSY_TIMEOUT_MS} (an int)"
    if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, numbers.Integral):
        kind = type(busy_timeout_ms).__name__
        if isinstance(busy_timeout_ms, float) and math.isnan(busy_timeout_ms):
            kind = "nan"
        raise ConfigurationError(f"{shown}: give {wanted}, not {kind}")
    if int(busy_timeout_ms) < 0:
        raise ConfigurationError(f"{shown}: must be >= 0; give {wanted}")
    if int(busy_timeout_ms) > MAX_BUSY_TIMEOUT_MS:
        raise ConfigurationError(f"{shown}: must be at most {MAX_BUSY_TIMEOUT_MS} "
                                 f"milliseconds (about 24.9 days); give {wanted}")


def check_policy(policy: Any) -> None:
    """A :class:`ConfigurationError` unless ``policy`` is ``None`` or a ``RetryPolicy``."""
    if policy is not None and not isinstance(policy, RetryPolicy):
        raise ConfigurationError(
            f"EventLogCallback(policy={_shown(policy)}): give a statemachine.RetryPolicy "
            f"(for example RetryPolicy(max_failures=3)) or None, not {type(policy).__name__}")


def check_flag(name: str, value: Any) -> None:
    """A :class:`ConfigurationError` unless ``value`` is ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise ConfigurationError(
            f"EventLogCallback({name}={_shown(value)}): give True or False, not "
            f"{type(value).__name__}")
