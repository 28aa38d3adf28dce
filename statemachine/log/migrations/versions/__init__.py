"""Versioned Alembic scripts; each freezes the tables it creates or changes."""
