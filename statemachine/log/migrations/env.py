"""Alembic environment of the event log.

Two ways in:
- programmatically, from :func:`statemachine.log.migrate.upgrade`, which passes an open
  connection in ``config.attributes["connection"]`` (and holds the migration lock);
- from the command line in a checkout: ``alembic -x url=sqlite:///exp.db upgrade head``, or
  with the URL in the ``STATEMACHINE_DB_URL`` environment variable (the top-level
  ``alembic.ini`` points at this folder, which the wheel ships).
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from statemachine.log.dialect import WRITER, backend_of
from statemachine.log.engine import make_engine, to_url
from statemachine.log.schema import metadata
from statemachine.log_location import DB_URL_ENV

config = context.config
target_metadata = metadata
if config.config_file_name is not None and "connection" not in config.attributes:
    fileConfig(config.config_file_name)  # the command line: log what is applied


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get(DB_URL_ENV)
    url = url or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit(
            f"no database URL: pass `alembic -x url=sqlite:///path.db ...` or set {DB_URL_ENV}"
        )
    return to_url(url)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=backend_of(connection).batch_migrations,
        compare_type=True,
    )


def run_migrations_offline() -> None:
    """Emit the SQL to stdout (``alembic upgrade head --sql``)."""
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through the caller's connection, or one made from the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    # The command line: one transaction for the whole run (SQLite: BEGIN IMMEDIATE, so a
    # migration interrupted half-way leaves the database as it was).
    engine = make_engine(_url(), writable=True)
    with engine.connect() as conn:
        conn = conn.execution_options(**{WRITER: True})
        with conn.begin():
            _configure(conn)
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
