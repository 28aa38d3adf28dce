"""Engines for the event log: URL handling, connection settings, error translation.

Each database's own settings (SQLite: WAL, ``synchronous``, busy timeout, foreign keys, and
``BEGIN IMMEDIATE`` on the store's writer connection; PostgreSQL: pre-ping) are installed by
its :class:`~statemachine.log.dialect.Backend`; a database of any other kind is refused
before an engine is made.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Dialect, Engine, Executable, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DataError, DBAPIError, SQLAlchemyError

from statemachine.distribution import install_hint
from statemachine.exceptions import ConfigurationError, StoreError, UnstorableValueError
from statemachine.log.dialect import (
    DEFAULT_BUSY_TIMEOUT_MS,
    SYNCHRONOUS_LEVELS,
    backend_for,
    database_file,
)


def to_url(url_or_path: str | Path) -> str:
    """A SQLAlchemy URL string for a URL or a bare filesystem path to a SQLite file.

    ``postgresql://`` and ``postgres://`` get the psycopg 3 driver.
    """
    text = str(url_or_path)
    if "://" not in text:
        return f"sqlite:///{Path(text).expanduser().resolve()}"
    for prefix in ("postgresql://", "postgres://"):
        if text.startswith(prefix):
            return "postgresql+psycopg://" + text[len(prefix) :]
    return text


def describe(url: str | URL) -> str:
    """The URL with any password hidden (also in its query), for messages."""
    from statemachine.log.credentials import describe_url

    return describe_url(url if isinstance(url, str) else url.render_as_string(False))


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL (``None`` for other databases or ``:memory:``)."""
    return database_file(url)


def make_engine(
    url: str,
    *,
    writable: bool,
    sqlite_synchronous: str = "FULL",
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
) -> Engine:
    """An engine for ``url`` with the event log's connection settings.

    Raises :class:`ConfigurationError` for a bad setting or URL
    (:class:`~statemachine.exceptions.UnsupportedDatabaseError` for a database other than
    SQLite and PostgreSQL), :class:`StoreError` when no engine can be made (a driver that is
    not installed).
    """
    level = str(sqlite_synchronous).upper()
    if level not in SYNCHRONOUS_LEVELS:
        raise ConfigurationError(
            f"sqlite_synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}, "
            f"got {sqlite_synchronous!r}"
        )
    backend = backend_for(url)
    parsed = make_url(url)
    creator = None if writable else backend.read_only_creator(parsed)
    extra: dict[str, Any] = {"creator": creator} if creator is not None else {}
    try:
        engine = create_engine(
            parsed, pool_pre_ping=backend.pool_pre_ping, paramstyle=backend.paramstyle, **extra
        )
    except ImportError as exc:
        raise StoreError(_missing_driver(parsed, exc)) from exc
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot use database URL {describe(parsed)}: {exc}") from exc
    backend.configure_engine(
        engine, writable=writable, synchronous=level, busy_timeout_ms=busy_timeout_ms
    )
    return engine


def _missing_driver(url: URL, exc: ImportError) -> str:
    """One line for a URL whose DBAPI driver is not installed, naming what to install."""
    module = exc.name or str(exc)
    if url.get_backend_name() == "postgresql" and url.get_driver_name() == "psycopg":
        return (
            f"a PostgreSQL event log needs the psycopg driver, which is not installed "
            f"(no module {module!r}): {install_hint('postgres')}"
        )
    return (
        f"the database driver for {describe(url)} is not installed (no module {module!r}): "
        f"install it, or use postgresql+psycopg:// with {install_hint('postgres')}"
    )


def translate(exc: SQLAlchemyError | UnicodeError, what: str, url: str) -> StoreError:
    """A :class:`StoreError` naming what failed, the database and the driver's message.

    A value the database refuses for what it is (``DataError``: a NUL in PostgreSQL text, a
    value too long for its column; a ``UnicodeError`` from the driver's encoding) is an
    :class:`UnstorableValueError`: retrying the same statement can never succeed.
    """
    original = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    message = (
        str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
    )
    hint = ""
    if "locked" in message or "busy" in message:
        hint = " (another process holds the write lock; retry, or raise the busy timeout)"
    permanent = isinstance(exc, (DataError, UnicodeError))
    kind = UnstorableValueError if permanent else StoreError
    error = kind(f"{what} failed on {describe(url)}: {message}{hint}")
    error.__cause__ = exc
    return error


@contextlib.contextmanager
def translated(what: str, url: str) -> Iterator[None]:
    """Translate any SQLAlchemy/driver error raised inside into a :class:`StoreError`."""
    try:
        yield
    except (SQLAlchemyError, UnicodeError) as exc:
        raise translate(exc, what, url) from exc


def chunks(items: list[str], size: int = 5_000) -> Iterator[list[str]]:
    """``items`` in slices small enough for an ``IN`` list (SQLite caps bound parameters)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Prepared:
    """A Core statement compiled once for one dialect, run on the DBAPI cursor (the hot path).

    ``Connection.execute(statement)`` walks the statement on every call to find its compiled
    form in the cache, and builds every parameter set through the compiler; for the append
    statement that costs as much as SQLite's insert itself. This keeps SQLAlchemy's compiled
    SQL and bind processors and hands the driver a positional parameter tuple (every
    supported backend compiles positionally: :attr:`Backend.paramstyle
    <statemachine.log.dialect.Backend.paramstyle>`).

    ``fields``: the statement's values come as tuples in this order (one entry per bind
    name; a name the statement binds twice is given once); without it, as dicts by bind
    name. Either way the parameters are taken from the values in C (``itemgetter``) and only
    the few values with a bind processor (SQLite's datetimes) are processed in Python.
    """

    def __init__(
        self, statement: Executable, dialect: Dialect, fields: Sequence[str] | None = None
    ) -> None:
        compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
        if not compiled.positional:
            raise TypeError(f"{dialect.name} must compile positionally (see Backend.paramstyle)")
        self.sql: str = compiled.string
        #: The bind name of each positional parameter, in the statement's order.
        self.names: tuple[str, ...] = tuple(compiled.positiontup)
        processors = {
            name: processor
            for name, bind in compiled.binds.items()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect))
        }
        self._processors: dict[str, Callable[[Any], Any]] = processors
        keys: Sequence[Any] = (
            self.names if fields is None else [list(fields).index(n) for n in self.names]
        )
        #: The values are the parameters as they are (tuples in the statement's order).
        self.in_order = fields is not None and tuple(fields) == self.names
        self._get = _getter(keys)
        # A value the statement carries itself (a ``LIMIT`` of a constant, SQLite's ``OFFSET
        # 0``) is bound as a parameter too: given dict values, it is added to them.
        constants = {name: bind.value for name, bind in compiled.binds.items()
                     if name in self.names and not bind.required}
        if constants and fields is None:
            get = self._get
            self._get = lambda values: get({**constants, **values})
        self._processed = tuple(
            (i, processors[n]) for i, n in enumerate(self.names) if n in processors
        )

    def processor(self, name: str) -> Callable[[Any], Any] | None:
        """The bind processor of parameter ``name`` (``None``: the driver takes the value)."""
        return self._processors.get(name)

    def params(self, values: Any) -> tuple[Any, ...]:
        """The driver's parameters for one set of ``values``."""
        found: tuple[Any, ...] = self._get(values)
        if not self._processed:
            return found
        items = list(found)
        for i, processor in self._processed:
            items[i] = processor(items[i])
        return tuple(items)

    def run(self, cursor: Any, values: Any) -> Any:
        """Run the statement once with ``values`` on a DBAPI cursor."""
        return cursor.execute(self.sql, self.params(values))

    def many_params(self, rows: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The driver's parameter sets for ``rows`` (an ``executemany``).

        A value shared by consecutive rows (a batch's one timestamp) is processed once.
        """
        get = self._get
        found = [get(row) for row in rows]
        if not self._processed:
            return found
        memo: dict[int, tuple[Any, Any]] = {}
        params: list[tuple[Any, ...]] = []
        for values in found:
            items = list(values)
            for i, processor in self._processed:
                raw = items[i]
                seen = memo.get(i)
                if seen is None or seen[0] is not raw:
                    seen = memo[i] = (raw, processor(raw))
                items[i] = seen[1]
            params.append(tuple(items))
        return params


def _getter(keys: Sequence[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """``values -> tuple(values[k] for k in keys)``, in C where it can be."""
    if len(keys) > 1:
        return operator.itemgetter(*keys)
    if len(keys) == 1:
        key = keys[0]
        return lambda values: (values[key],)
    return lambda values: ()
