"""Secrets in URLs: never printed, never persisted, found again where the user keeps them.

A log URL may carry a password (``postgresql+psycopg://user:PASSWORD@host/db``) and a storage
URI may carry keys (``s3://KEY:SECRET@bucket/path``, ``...?secret_key=...``). Messages show them
through :func:`describe_url` / :func:`redact_uri`; what is saved (the Tune callback in the
experiment state) keeps the URL without its password (:func:`without_password`), and
:func:`with_password` gets it back from the environment at restore: ``STATEMACHINE_DB_URL``
naming the same database and user with a password, else libpq's own ``PGPASSWORD`` or password
file (``PGPASSFILE``, default ``~/.pgpass``), which psycopg reads itself when the URL has no
password.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from statemachine.exceptions import CredentialsNotFoundError
from statemachine.log_location import DB_URL_ENV

HIDDEN = "***"
#: Query parameters of a storage URI whose values are secrets (case-insensitive substrings).
_SECRET_QUERY = re.compile(r"secret|password|passwd|pwd|token|key|signature|sig|credential",
                           re.IGNORECASE)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@?#\s]*)@")


def _parse(url: str) -> URL | None:
    if "://" not in url:
        return None
    try:
        return make_url(url)
    except (ArgumentError, ValueError):
        return None


def describe_url(url: str) -> str:
    """A database URL for messages: the password hidden (other text left as it is)."""
    parsed = _parse(url)
    if parsed is None:
        return redact_uri(url)
    secret = [key for key in parsed.query if _SECRET_QUERY.search(key)]
    if secret:
        parsed = parsed.update_query_dict(dict.fromkeys(secret, HIDDEN))
    return parsed.render_as_string(hide_password=True)


def without_password(url: str) -> tuple[str, bool]:
    """The URL without its password (also a ``password=`` query parameter), and whether it
    had one; paths come back unchanged."""
    parsed = _parse(url)
    if parsed is None or (parsed.password is None and "password" not in parsed.query):
        return url, False
    stripped = URL.create(
        parsed.drivername, parsed.username, None, parsed.host, parsed.port, parsed.database,
        parsed.query,
    ).difference_update_query(["password"])
    return stripped.render_as_string(hide_password=False), True


def _same_database(a: URL, b: URL) -> bool:
    return (
        a.get_backend_name() == b.get_backend_name()
        and (a.host or "localhost") == (b.host or "localhost")
        and (a.port or 0) == (b.port or 0)
        and a.database == b.database
        and a.username == b.username
    )


def _pgpass_path(env: Mapping[str, str]) -> Path:
    if env.get("PGPASSFILE"):
        return Path(env["PGPASSFILE"]).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".pgpass"


def _pgpass_fields(line: str) -> list[str]:
    fields, current, escaped = [], [], False
    for char in line:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":":
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    fields.append("".join(current))
    return fields


def pgpass_entry(path: Path, url: URL) -> tuple[bool, str]:
    """Whether libpq's password file ``path`` has a line for ``url``, and what was found."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False, f"{path} (no such file)"
    except OSError as exc:
        return False, f"{path} (unreadable: {exc.strerror})"
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        return False, f"{path} (ignored by libpq: permissions too open; chmod 600 it)"
    wanted = [url.host or "localhost", str(url.port or 5432), url.database or "",
              url.username or ""]
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = _pgpass_fields(line)
        pairs = zip(fields[:4], wanted, strict=False)
        if len(fields) >= 5 and all(f in ("*", w) for f, w in pairs):
            return True, f"{path}"
    host, port, database, user = wanted
    return False, f"{path} (no line for {host}:{port}:{database}:{user})"


def with_password(url: str, *, env: Mapping[str, str] | None = None) -> str:
    """``url`` (saved without its password) made usable again from the environment.

    Looks in ``STATEMACHINE_DB_URL`` (the same backend, host, port, database and user, with a
    password: that password is used), then for PostgreSQL in ``PGPASSWORD`` and the password
    file (``PGPASSFILE`` or ``~/.pgpass``), which libpq reads itself: the URL is then returned
    unchanged. Raises :class:`CredentialsNotFoundError` naming every place looked in.
    """
    env = os.environ if env is None else env
    parsed = _parse(url)
    if parsed is None or parsed.password is not None:
        return url
    looked: list[str] = []
    from_env = (env.get(DB_URL_ENV) or "").strip()
    candidate = _parse(from_env) if from_env else None
    if candidate is not None and candidate.password is not None and _same_database(
        parsed, candidate
    ):
        return parsed.set(password=candidate.password).render_as_string(hide_password=False)
    if not from_env:
        looked.append(f"{DB_URL_ENV} (not set)")
    elif candidate is None or not _same_database(parsed, candidate):
        looked.append(f"{DB_URL_ENV} (names another database or user)")
    else:
        looked.append(f"{DB_URL_ENV} (has no password)")
    if parsed.get_backend_name() == "postgresql":
        if env.get("PGPASSWORD"):
            return url
        looked.append("PGPASSWORD (not set)")
        found, where = pgpass_entry(_pgpass_path(env), parsed)
        if found:
            return url
        looked.append(where)
    raise CredentialsNotFoundError(
        f"the event log URL {describe_url(url)} needs its password, which is never saved with "
        f"the experiment; none found in: {', '.join(looked)}. Set {DB_URL_ENV} to the full URL "
        "(or PGPASSWORD, or a ~/.pgpass line) before Tuner.restore"
    )


def redact_uri(text: str) -> str:
    """A storage path or URI for messages and records: user info and secret-looking query
    values (``secret_key=``, ``token=``, ...) replaced by ``***``."""
    if "://" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{HIDDEN}@", text)
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if not parts.query:
        return text
    query = [(k, HIDDEN if _SECRET_QUERY.search(k) else v)
             for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    return urlunsplit(parts._replace(query=urlencode(query, safe="*")))
