"""Alembic environment of the event log (installed as ``statemachine.log.migrations``)."""
