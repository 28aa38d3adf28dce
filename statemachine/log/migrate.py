"""Schema versions of the event log, by Alembic: find the scripts, read, check, upgrade.

The Alembic environment and scripts live in the package, ``statemachine/log/migrations/``
(real files, the one source of truth: the wheel ships them, ``script.py.mako`` as package
data, and the top-level ``alembic.ini`` of a checkout points there). An installed
statemachine therefore migrates the databases it opens exactly as ``alembic upgrade head``
does from a checkout, and ``trial-replay --db URL db upgrade`` does the same by hand. Only
:func:`upgrade` writes; the other functions only read.

Alembic (about a third of a second to import, with Mako and every dialect's DDL) is imported
only where a migration runs: reading and checking a database's revision is one ``SELECT``
against :data:`REVISIONS`, so a reader (every ``trial-replay`` read command) and a driver
opening an up-to-date log never load it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Column, Connection, Engine, MetaData, String, Table, inspect, select

from statemachine.distribution import cli_command, install_hint
from statemachine.exceptions import NotAnEventLogError, SchemaVersionError, StoreError
from statemachine.log.dialect import WRITER, backend_of
from statemachine.log.engine import describe, translated
from statemachine.log.schema import TABLE_NAMES, experiments

if TYPE_CHECKING:
    from alembic.config import Config

#: Key of the lock that serialises concurrent upgrades (PostgreSQL: an advisory lock).
_MIGRATION_LOCK = 0x5EED_1060


#: Alembic's version table (its default name; env.py keeps it).
_VERSION_TABLE = "alembic_version"
_VERSION = Table(_VERSION_TABLE, MetaData(), Column("version_num", String(32)))

#: Every revision of ``migrations/versions``, oldest first (the last is the head): what a
#: database's stamp is checked against without importing Alembic. A new script adds its
#: revision here (tests/log/test_migrations.py compares this with Alembic's own chain).
REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006")

#: The command that creates or migrates an event log without a checkout.
UPGRADE_COMMAND = "trial-replay --db URL db upgrade"


def script_location() -> Path:
    """The directory holding ``env.py``, ``script.py.mako`` and ``versions/``."""
    location = Path(__file__).resolve().parent / "migrations"
    if not (location / "env.py").is_file():
        raise StoreError(
            "the event log's migration scripts are missing from this installation of "
            f"statemachine; reinstall it ({install_hint(reinstall=True)})"
        )
    return location


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic :class:`Config` for the packaged scripts, optionally bound to a connection."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location()).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest schema revision this code knows."""
    return REVISIONS[-1]


def known_revisions() -> set[str]:
    """Every revision this code's scripts define."""
    return set(REVISIONS)


def current_revision(bind: Engine | Connection) -> str | None:
    """The revision a database is stamped with (``None``: never migrated). Reads only.

    What Alembic's ``MigrationContext.get_current_revision`` reads: the one row of its
    version table, in the connection's default schema.
    """
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return current_revision(conn)
    if not inspect(bind).has_table(_VERSION_TABLE):
        return None
    stamps = list(bind.execute(select(_VERSION.c.version_num)).scalars())
    if len(stamps) > 1:
        raise StoreError(
            f"the event log's version table holds several revisions ({', '.join(stamps)}); "
            "it was not stamped by statemachine's migrations"
        )
    return stamps[0] if stamps else None


def has_event_tables(conn: Connection) -> bool:
    """Whether any of the event log's tables exists in the database."""
    names = set(inspect(conn).get_table_names())
    return any(name in names for name in TABLE_NAMES)


def refuse_foreign(conn: Connection, revision: str | None, url: str) -> None:
    """Raise :class:`NotAnEventLogError` for another application's Alembic-managed database.

    A revision this code does not know is a newer statemachine only where the event log's
    tables exist; without them (another application may well have an ``events`` table) the
    stamp is another application's.
    """
    if revision is None or revision in known_revisions():
        return
    names = set(inspect(conn).get_table_names())
    if not all(name in names for name in TABLE_NAMES):
        raise NotAnEventLogError(
            f"{describe(url)} is not a statemachine event log: it holds another application's "
            f"schema (Alembic revision {revision!r}) without the event log's tables; give "
            "the event log a database (or PostgreSQL schema) of its own"
        )


def check_revision(revision: str | None, url: str, *, writable: bool) -> None:
    """Refuse a database this code must not use; ``writable`` allows an older one.

    Raises :class:`SchemaVersionError` naming both revisions and the fix.
    """
    head = head_revision()
    if revision == head:
        return
    where = describe(url)
    if revision is not None and revision not in known_revisions():
        raise SchemaVersionError(
            f"the event log at {where} has schema revision {revision!r}, newer than this "
            f"statemachine knows (its newest is {head!r}); upgrade statemachine to open it",
            revision,
            head,
        )
    if not writable:
        upgrade = cli_command("--db", where, "db", "upgrade")
        raise SchemaVersionError(
            f"the event log at {where} has schema revision {revision!r}, older than this "
            f"statemachine's {head!r}; upgrade it with `{upgrade}` "
            "(or open it once for writing, EventStore.open(url)), then read it",
            revision,
            head,
        )


def revision_state(revision: str | None) -> str:
    """Where a database's revision stands against this code's head.

    ``"head"`` (up to date), ``"older"`` (``db upgrade`` applies the rest), ``"newer"`` (made
    by a newer statemachine: upgrade statemachine) or ``"none"`` (never migrated).
    """
    if revision is None:
        return "none"
    if revision == head_revision():
        return "head"
    return "older" if revision in known_revisions() else "newer"


def upgrade(engine: Engine) -> str:
    """Apply every pending migration (under a lock: concurrent openers wait); return the head.

    A database newer than this code is refused with :class:`SchemaVersionError` and left as
    it is; a database holding the tables but no version stamp with :class:`NotAnEventLogError`.
    """
    url = engine.url.render_as_string(hide_password=False)
    with translated("migrating the event log", url), engine.connect() as conn:
        conn = conn.execution_options(**{WRITER: True})
        with conn.begin():
            backend_of(conn).lock_migrations(conn, _MIGRATION_LOCK)
            revision = current_revision(conn)
            refuse_foreign(conn, revision, url)
            check_revision(revision, url, writable=True)
            if revision is None and has_event_tables(conn):
                raise NotAnEventLogError(
                    f"{describe(url)} holds event log tables but no schema version; it was not "
                    "made by statemachine's migrations. Use a new database, or stamp it with "
                    "`alembic -x url=... stamp <revision>` (from a checkout) if you know its "
                    "revision"
                )
            if revision != head_revision():
                from alembic import command

                command.upgrade(alembic_config(conn), "head")
    return head_revision()


def remove(engine: Engine, experiment: str) -> bool:
    """Drop the event log's tables and version stamp (every migration downgraded, in one
    transaction), unless it holds an experiment other than ``experiment``: then it is left
    as it is and ``False`` returned. Only for a log this process just created for
    ``experiment`` and must not leave behind (a failed ``import`` into a new PostgreSQL
    database or schema); another writer that started using it meanwhile keeps it."""
    url = engine.url.render_as_string(hide_password=False)
    with translated("removing the event log", url), engine.connect() as conn:
        conn = conn.execution_options(**{WRITER: True})
        with conn.begin():
            backend_of(conn).lock_migrations(conn, _MIGRATION_LOCK)
            if current_revision(conn) is None:
                return True
            names = set(conn.execute(select(experiments.c.name)).scalars())
            if names - {experiment}:
                return False
            from alembic import command

            command.downgrade(alembic_config(conn), "base")
            Table(_VERSION_TABLE, MetaData()).drop(conn, checkfirst=True)
    return True
