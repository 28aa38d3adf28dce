"""The databases the log supports, and bad settings: refused with one clear line, nothing made.

Every backend difference lives in ``statemachine.log.dialect``; the contract suites prove
SQLite and PostgreSQL behave alike. Here: anything else is refused before an engine (or a
file) is made, and bad arguments are configuration errors (never a ``StoreError``, which a
caller such as the Tune recorder would retry as if the store were down).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statemachine import RetryPolicy
from statemachine.exceptions import (
    ConfigurationError,
    StateMachineError,
    StoreError,
    UnsupportedDatabaseError,
)
from statemachine.log import EventStore, ExperimentLog
from statemachine.log.dialect import SUPPORTED, backend_for, database_file
from statemachine.log.engine import make_engine


@pytest.mark.parametrize(
    "url",
    [
        "mysql+pymysql://user:secret@db.example/exp",
        "oracle://user:secret@db.example/exp",
        "mssql+pyodbc://user:secret@db.example/exp",
        "duckdb:///exp.duckdb",
    ],
)
def test_unsupported_databases_are_refused_naming_what_is_supported(url: str) -> None:
    for create in (True, False):
        with pytest.raises(UnsupportedDatabaseError) as refused:
            EventStore.open(url, create=create)
        message = str(refused.value)
        assert "\n" not in message
        assert "SQLite and PostgreSQL" in message and "sqlite:///" in message
        assert "secret" not in message  # the URL is named with its password hidden
        assert isinstance(refused.value, ConfigurationError)
        assert isinstance(refused.value, ValueError)
        assert not isinstance(refused.value, StoreError)


def test_a_string_that_is_not_a_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="not a database URL"):
        EventStore.open("://nothing")


def test_the_supported_backends_are_sqlite_and_postgresql() -> None:
    assert SUPPORTED == ("sqlite", "postgresql")
    assert backend_for("sqlite:///x.db").database_file("sqlite:///x.db") == Path("x.db")
    assert backend_for("sqlite://").database_file("sqlite://") is None
    assert backend_for("postgresql+psycopg://h/db").database_file("postgresql://h/db") is None
    # The file check of any URL (the Tune callback's network-filesystem warning) never raises.
    assert database_file("sqlite:////tmp/x.db") == Path("/tmp/x.db")
    assert database_file("mysql://u@h/db") is None and database_file("://x") is None


def test_a_bad_sqlite_synchronous_level_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    with pytest.raises(ConfigurationError, match="sqlite_synchronous must be one of"):
        EventStore.open(path, sqlite_synchronous="SOMETIMES")
    with pytest.raises(ConfigurationError, match="sqlite_synchronous"):
        make_engine(f"sqlite:///{path}", writable=True, sqlite_synchronous="fast")
    assert not path.exists()


def test_snapshot_every_below_one_is_a_configuration_error(sqlite_url: str) -> None:
    with pytest.raises(ConfigurationError, match="snapshot_every must be >= 1, got 0"):
        ExperimentLog.open(sqlite_url, "exp", RetryPolicy(), snapshot_every=0)


def test_more_events_than_event_ids_is_a_configuration_error(sqlite_url: str) -> None:
    from statemachine import TrialAdded, TrialStarted

    with ExperimentLog.open(sqlite_url, "exp", RetryPolicy()) as log:
        with pytest.raises(ConfigurationError, match="2 events but 1 event ids"):
            log.record_many([("t1", TrialAdded()), ("t1", TrialStarted())], event_ids=["a"])
        assert log.state("t1") is None
        assert log.store.list_experiments()[0].events == 0


def test_configuration_errors_are_library_errors() -> None:
    assert issubclass(ConfigurationError, StateMachineError)
    assert issubclass(UnsupportedDatabaseError, ConfigurationError)
