"""Schema versions: Alembic from the checkout and on open, checks, refusals, the wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from statemachine.distribution import cli_command
from statemachine.exceptions import NotAnEventLogError, SchemaVersionError, StoreNotFoundError
from statemachine.log import EventStore
from statemachine.log.migrate import (
    check_revision,
    current_revision,
    head_revision,
    script_location,
)
from statemachine.log.schema import TABLE_NAMES, metadata

REPO = Path(__file__).resolve().parents[2]


def alembic(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    """Run the alembic command line from the repository root, as a developer would."""
    env = {**os.environ, "STATEMACHINE_DB_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


class MigrationContract:
    """Migration behaviour on one backend; subclasses provide ``url``."""

    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError

    def test_alembic_upgrade_head_from_the_checkout(self, url: str) -> None:
        done = alembic("upgrade", "head", url=url)
        assert done.returncode == 0, done.stderr
        engine = create_engine(url)
        assert current_revision(engine) == head_revision()
        assert set(TABLE_NAMES) <= set(inspect(engine).get_table_names())
        engine.dispose()
        with EventStore.open(url, create=False) as store:
            assert store.list_experiments() == []

    def test_x_url_argument_works_too(self, url: str) -> None:
        env_free = {k: v for k, v in os.environ.items() if k != "STATEMACHINE_DB_URL"}
        done = subprocess.run(
            [sys.executable, "-m", "alembic", "-x", f"url={url}", "upgrade", "head"],
            cwd=REPO, env=env_free, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert current_revision(create_engine(url)) == head_revision()

    def test_schema_after_migrations_equals_the_models(self, url: str) -> None:
        EventStore.open(url).close()
        engine = create_engine(url)
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
        engine.dispose()
        check = alembic("check", url=url)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "No new upgrade operations detected" in check.stdout + check.stderr

    def test_database_newer_than_the_code_is_refused_and_left_alone(self, url: str) -> None:
        EventStore.open(url).close()
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = 'f00dfeed0099'"))
        for create in (True, False):
            with pytest.raises(SchemaVersionError) as refused:
                EventStore.open(url, create=create)
            message = str(refused.value)
            assert "f00dfeed0099" in message and head_revision() in message
            assert "newer" in message and "upgrade statemachine" in message
            assert refused.value.database_revision == "f00dfeed0099"
            assert refused.value.code_revision == head_revision()
        assert current_revision(engine) == "f00dfeed0099"
        engine.dispose()

    def test_read_only_open_of_an_empty_database_creates_nothing(self, url: str) -> None:
        engine = create_engine(url)
        engine.connect().close()  # an empty database (SQLite: an empty file)
        with pytest.raises(NotAnEventLogError, match="not a statemachine event log"):
            EventStore.open(url, create=False)
        assert not set(inspect(engine).get_table_names()) & {*TABLE_NAMES, "alembic_version"}
        engine.dispose()

    def test_tables_without_a_version_stamp_are_not_taken_over(self, url: str) -> None:
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE events (id INTEGER PRIMARY KEY)"))
        with pytest.raises(NotAnEventLogError, match="no schema version"):
            EventStore.open(url)
        assert current_revision(engine) is None
        engine.dispose()

    def test_another_applications_alembic_schema_is_not_an_event_log(self, url: str) -> None:
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
            conn.execute(text("INSERT INTO alembic_version VALUES ('a1b2c3d4e5f6')"))
            conn.execute(text("CREATE TABLE events (id INTEGER PRIMARY KEY)"))
        for create in (True, False):
            with pytest.raises(NotAnEventLogError, match="another application"):
                EventStore.open(url, create=create)
        assert current_revision(engine) == "a1b2c3d4e5f6"
        assert not set(inspect(engine).get_table_names()) & {"experiments", "snapshots"}
        engine.dispose()


def test_one_source_of_migration_scripts() -> None:
    """The package folder holds the real scripts; the checkout's alembic.ini points there and
    the top-level migrations/ holds none (so the two cannot drift apart)."""
    from alembic.config import Config

    package = REPO / "statemachine" / "log" / "migrations"
    assert script_location() == package.resolve()
    assert not package.is_symlink()
    assert all(not p.is_symlink() for p in package.rglob("*"))
    assert {"env.py", "script.py.mako", "__init__.py"} <= {p.name for p in package.iterdir()}
    assert sorted(p.name for p in (package / "versions").glob("0*.py"))
    config = Config(str(REPO / "alembic.ini"))
    assert Path(config.get_main_option("script_location") or "").resolve() == package.resolve()
    top = REPO / "migrations"
    assert sorted(p.name for p in top.rglob("*") if "__pycache__" not in p.parts) == [
        "README.md"
    ], "migration scripts belong in statemachine/log/migrations/ (the wheel ships that folder)"


def test_the_revisions_a_reader_checks_are_alembics_chain() -> None:
    """Readers check a database's stamp against ``REVISIONS`` without importing Alembic: it
    must be the scripts' chain, oldest first (a new script that is not added fails here)."""
    from alembic.script import ScriptDirectory

    from statemachine.log.migrate import REVISIONS, alembic_config

    scripts = ScriptDirectory.from_config(alembic_config())
    chain = [s.revision for s in scripts.walk_revisions()][::-1]
    assert list(REVISIONS) == chain
    assert head_revision() == scripts.get_current_head()


def test_an_older_schema_opened_read_only_names_the_upgrade_command() -> None:
    url = "postgresql+psycopg://me:secret@db.example/exp"
    with pytest.raises(SchemaVersionError) as refused:
        check_revision(None, url, writable=False)
    message = str(refused.value)
    assert "older" in message
    # the command pastes as it is: the script's full path when it is not on PATH, quoted
    command = cli_command("--db", "postgresql+psycopg://me:***@db.example/exp", "db", "upgrade")
    assert command.endswith("trial-replay --db 'postgresql+psycopg://me:***@db.example/exp' "
                            "db upgrade")
    assert f"`{command}`" in message
    assert "secret" not in message and "alembic" not in message


class TestSQLiteMigrations(MigrationContract):
    @pytest.fixture
    def url(self, sqlite_url: str) -> str:
        return sqlite_url

    def test_read_only_open_of_a_missing_file_creates_nothing(self, tmp_path: Path) -> None:
        missing = tmp_path / "nothing" / "here.db"
        with pytest.raises(StoreNotFoundError, match="does not exist"):
            EventStore.open(missing, create=False)
        assert not missing.exists() and not missing.parent.exists()

    def test_a_file_that_is_not_a_database_is_refused_and_left_alone(self, tmp_path: Path) -> None:
        notes = tmp_path / "notes.db"
        notes.write_text("these are my notes, not a database\n" * 100)
        for create in (False, True):
            with pytest.raises(NotAnEventLogError, match="not a statemachine event log"):
                EventStore.open(notes, create=create)
        assert notes.read_text() == "these are my notes, not a database\n" * 100
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]

    def test_bare_path_is_a_sqlite_file(self, tmp_path: Path) -> None:
        path = tmp_path / "sub" / "exp.db"
        EventStore.open(path).close()
        with EventStore.open(str(path), create=False) as store:
            assert store.dialect == "sqlite"

    def test_sqlite_settings_keep_data(self, sqlite_url: str) -> None:
        with EventStore.open(sqlite_url) as store, store.engine.connect() as conn:
            pragma = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            }
        assert pragma == {
            "journal_mode": "wal", "synchronous": 2, "foreign_keys": 1, "busy_timeout": 10_000
        }  # fmt: skip
        with EventStore.open(sqlite_url, sqlite_synchronous="normal") as store:
            with store.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1


@pytest.mark.postgres
class TestPostgresMigrations(MigrationContract):
    @pytest.fixture
    def url(self, pg_url: str) -> str:
        return pg_url

    def test_removing_a_new_log_drops_it_unless_another_experiment_writes_there(
        self, url: str
    ) -> None:
        from statemachine import RetryPolicy
        from statemachine.log.store import remove_new_event_log, schema_revision

        with EventStore.open(url) as store:
            store.start_session("imported", policy=RetryPolicy())
        assert remove_new_event_log(url, "imported") is True
        assert schema_revision(url) is None
        assert inspect(create_engine(url)).get_table_names() == []
        # Another experiment arrived meanwhile: the log is someone's now, kept whole.
        with EventStore.open(url) as store:
            store.start_session("imported", policy=RetryPolicy())
            store.start_session("a driver's", policy=RetryPolicy())
        assert remove_new_event_log(url, "imported") is False
        with EventStore.open(url, create=False) as store:
            assert sorted(i.name for i in store.list_experiments()) == ["a driver's", "imported"]

    def test_unknown_database_is_not_found(self, pg_server_url: str) -> None:
        url = pg_server_url.rsplit("/", 1)[0] + "/statemachine_no_such_db"
        with pytest.raises(StoreNotFoundError, match="does not exist"):
            EventStore.open(url, create=False)


@pytest.mark.slow
def test_wheel_installed_in_a_fresh_virtualenv_opens_a_new_store(tmp_path: Path) -> None:
    """Build the wheel, install it (not editable) in a new venv, open and migrate a store."""
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    [wheel] = dist.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "statemachine/log/migrations/script.py.mako" in names
    assert "statemachine/log/migrations/env.py" in names
    assert any(n.startswith("statemachine/log/migrations/versions/0") for n in names)
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        import statemachine
        from statemachine import RetryPolicy, TrialAdded
        from statemachine.log import EventStore, ExperimentLog
        from statemachine.log.migrate import current_revision, head_revision, script_location

        assert sys.prefix != sys.base_prefix
        assert statemachine.__file__.startswith(sys.prefix), statemachine.__file__
        assert str(script_location()).startswith(sys.prefix), script_location()
        assert (script_location() / "script.py.mako").is_file()
        with ExperimentLog.open(sys.argv[1], "exp", RetryPolicy(max_failures=1)) as log:
            log.record("t1", TrialAdded())
        with EventStore.open(sys.argv[1], create=False) as store:
            assert current_revision(store.engine) == head_revision()
            print(store.list_trials("exp"), head_revision())
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STATEMACHINE_DB_URL")}
    run = subprocess.run(
        [str(python), "-c", script, str(tmp_path / "new.db")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"['t1'] {head_revision()}"
    # The command the schema-version error names works from the wheel, without a checkout.
    cli = venv / "bin" / "trial-replay"
    for args in (["upgrade", "--json"], ["current", "--json"]):
        done = subprocess.run(
            [str(cli), "--db", str(tmp_path / "other.db"), "db", *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["revision"] == head_revision()
    with EventStore.open(tmp_path / "other.db", create=False) as store:
        assert store.list_experiments() == []


def test_a_log_at_revision_0001_upgrades_with_its_sessions_intact(tmp_path: Path) -> None:
    """0002 adds driver_sessions.kind: an older log keeps every row, its sessions unknown."""
    from alembic import command
    from sqlalchemy import create_engine

    from statemachine.cli import main
    from statemachine.domain.events import TrialAdded
    from statemachine.domain.policy import RetryPolicy
    from statemachine.log import EventStore, ExperimentLog
    from statemachine.log.migrate import alembic_config

    db = tmp_path / "old.db"
    with create_engine(f"sqlite:///{db}").begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
        conn.exec_driver_sql(
            "INSERT INTO experiments (name, storage_path, created_at, epoch) "
            "VALUES ('old', NULL, '2026-11-01 00:00:00', 1)")
        conn.exec_driver_sql(
            "INSERT INTO driver_sessions (experiment_id, epoch, host, pid, versions, policy, "
            "started_at, ended_at, clean_end) VALUES (1, 1, 'h', 7, '{}', '{}', "
            "'2026-11-01 00:00:00', '2026-11-01 00:01:00', 1)")
    with pytest.raises(SchemaVersionError, match="db upgrade"):
        EventStore.open(db, create=False)
    assert main(["--db", str(db), "db", "upgrade"]) == 0
    with EventStore.open(db, create=False) as store:
        (old,) = store.list_sessions("old")
        assert (old.epoch, old.host, old.pid, old.clean_end, old.kind) == (1, "h", 7, True, None)
    with ExperimentLog.open(str(db), "old", RetryPolicy(), session_kind="restore") as log:
        log.record("t", TrialAdded())
    with EventStore.open(db, create=False) as store:
        assert [(s.epoch, s.kind) for s in store.list_sessions("old")] == [
            (1, None), (2, "restore")]
    exported = tmp_path / "old.jsonl"
    assert main(["--db", str(db), "export", "old", "-o", str(exported)]) == 0
    copy = tmp_path / "copy.db"
    assert main(["--db", str(copy), "import", str(exported)]) == 0
    with EventStore.open(copy, create=False) as store:
        assert [(s.epoch, s.kind) for s in store.list_sessions("old")] == [
            (1, None), (2, "restore")]


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_log_at_revision_0002_upgrades_with_its_rows_intact_and_gets_an_identity(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """0003 adds experiments.log_id: an older log keeps every row, its identity unknown (NULL)
    until its next driver session writes one, which then stays."""
    from alembic import command

    from statemachine.cli import main
    from statemachine.domain.events import CheckpointSaved, TrialAdded, TrialStarted
    from statemachine.domain.policy import RetryPolicy
    from statemachine.log import ExperimentLog, verify
    from statemachine.log.migrate import alembic_config

    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    with ExperimentLog.open(url, "old", RetryPolicy(), storage_path="b/exps/old") as log:
        for trial in ("t1", "t2"):
            log.record(trial, TrialAdded(config={"lr": 0.1}))
            log.record(trial, TrialStarted())
            log.record(trial, CheckpointSaved(f"{trial}/ckpt"))
    engine = create_engine(url)
    with engine.begin() as conn:  # the log as revision 0002 left it (its rows real)
        command.downgrade(alembic_config(conn), "0002")
    assert current_revision(engine) == "0002"
    assert "log_id" not in {c["name"] for c in inspect(engine).get_columns("experiments")}
    with engine.connect() as conn:
        rows_before = conn.execute(text("SELECT * FROM events ORDER BY position")).all()
    engine.dispose()

    assert main(["--db", url, "db", "upgrade"]) == 0
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT * FROM events ORDER BY position")).all() == rows_before
        assert conn.execute(text("SELECT name, storage_path, log_id FROM experiments")).all() \
            == [("old", "b/exps/old", None)]
    with EventStore.open(url, create=False) as store:
        assert verify(store, "old").ok
    with ExperimentLog.open(url, "old", RetryPolicy(), storage_path="b/exps/old") as log:
        log.record("t1", CheckpointSaved("t1/ckpt2"))
    with engine.connect() as conn:
        (log_id,) = conn.execute(text("SELECT log_id FROM experiments")).scalars()
    assert log_id is not None and len(log_id) == 32
    with ExperimentLog.open(url, "old", RetryPolicy(), storage_path="b/exps/old"):
        pass
    with engine.connect() as conn:
        assert conn.execute(text("SELECT log_id FROM experiments")).scalars().all() == [log_id]
    engine.dispose()
