"""``trial-replay db upgrade`` and ``trial-replay db current``: the event log's schema version.

The one way to migrate a log by hand without a checkout (an installed statemachine has no
``alembic.ini``); what :class:`~statemachine.exceptions.SchemaVersionError` tells people to
run, as Optuna names ``optuna storage upgrade``.
"""

from __future__ import annotations

from typing import Any

import click

from statemachine.cli.db import resolve_db, resolve_write_target
from statemachine.cli.output import Output, json_option
from statemachine.exceptions import StoreNotFoundError

_STATE_TEXT = {
    "head": "up to date",
    "older": "older than this statemachine: run `trial-replay --db URL db upgrade`",
    "newer": "made by a newer statemachine: upgrade statemachine to use it",
    "none": "no event log schema yet: `trial-replay --db URL db upgrade` creates it",
}


def _current(target: str) -> dict[str, Any]:
    from statemachine.log.credentials import redact_uri
    from statemachine.log.engine import describe, to_url
    from statemachine.log.migrate import head_revision, revision_state
    from statemachine.log.remote import downloaded, is_storage_uri
    from statemachine.log.store import schema_revision

    if is_storage_uri(target):  # the copy a Tune experiment keeps on its storage
        with downloaded(target) as local:
            revision = schema_revision(local)
        database = redact_uri(target)
    else:
        revision = schema_revision(target)
        database = describe(to_url(target))
    return {
        "database": database,
        "revision": revision,
        "head": head_revision(),
        "is_head": revision == head_revision(),
        "state": revision_state(revision),
    }


@click.group("db")
def db() -> None:
    """The event log's schema: create or migrate it (``upgrade``), show its version
    (``current``)."""


@db.command("upgrade")
@json_option
@click.pass_obj
def upgrade(out: Output, as_json: bool) -> int:
    """Create the event log at --db, or migrate it to this statemachine's schema (what
    opening it for writing does; safe to run while drivers use it, and again). A database
    made by a newer statemachine is refused and left as it is."""
    from statemachine.log import EventStore
    from statemachine.log.engine import describe, to_url
    from statemachine.log.store import schema_revision

    target = resolve_write_target(out.db, "db upgrade")
    try:
        before = schema_revision(target)
    except StoreNotFoundError:
        before = None  # a new SQLite file: upgrading creates it
    EventStore.open(target).close()
    after = _current(target)
    data = {
        "database": describe(to_url(target)),
        "from_revision": before,
        "revision": after["revision"],
        "upgraded": before != after["revision"],
    }
    if as_json:
        out.json(data)
    elif data["upgraded"]:
        out.text(f"Upgraded {data['database']} from revision {before or 'none'} to "
                 f"{data['revision']} (head).")
    else:
        out.text(f"{data['database']} is at revision {data['revision']} (head): nothing to do.")
    return out.exit_code


@db.command("current")
@json_option
@click.pass_obj
def current(out: Output, as_json: bool) -> int:
    """Show the schema revision of the event log at --db and whether it is this
    statemachine's head. Reads only: never creates or migrates anything."""
    data = _current(resolve_db(out.db))
    if as_json:
        out.json(data)
    else:
        out.text(f"{data['database']}: revision {data['revision'] or 'none'} "
                 f"(this statemachine's head: {data['head']}): {_STATE_TEXT[data['state']]}")
    return out.exit_code
