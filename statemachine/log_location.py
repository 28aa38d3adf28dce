"""Where the event log is found: the environment variable naming it and its file name.

One owner for both, with no dependency at all, so the Tune integration, the CLI and the
Alembic environment read them without importing SQLAlchemy, Alembic or Ray.
"""

#: Environment variable holding the event log's URL (the Tune callback's default store, the
#: CLI's default ``--db``, the URL ``alembic`` migrates from a checkout).
DB_URL_ENV = "STATEMACHINE_DB_URL"

#: The event log's file name inside an experiment folder (the Tune callback's default SQLite
#: store; what ``trial-replay --db FOLDER`` opens).
DEFAULT_LOG_FILENAME = "statemachine.db"
