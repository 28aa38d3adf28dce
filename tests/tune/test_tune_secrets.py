"""A planted password never shows: not in any output, log line, file or row (issue 16, item 10).

A PostgreSQL role with a password (created here, dropped afterwards) records the driver-crash
scenario through ``EventLogCallback(url="postgresql+psycopg://role:PASSWORD@...")``. The
restore finds the password in ``STATEMACHINE_DB_URL``, and without it fails with one line
naming where it looked. Then everything is searched for the password: both drivers' stdout and
stderr, Ray's session logs, every file of the experiment folder (``tuner.pkl`` included), the
drivers' homes, every row of the log's tables, and every ``trial-replay`` output (human and
``--json``), also for a ``--db`` URL that fails.

The local test server trusts connections from 127.0.0.1 (pg_hba ``host all all 127.0.0.1/32
trust``), so the password is carried everywhere a real one would be but not checked.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from statemachine.cli import cli
from tests.tune.test_tune_driver_crash import Driver, kill_group, run_scenario, start_driver

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def secret_role(pg_url: str) -> Iterator[tuple[str, str]]:
    """A login role with a password, owning the test's schema: (URL with password, password)."""
    import psycopg

    role, password = f"sm_secret_{uuid.uuid4().hex[:8]}", f"PLANTED-{uuid.uuid4().hex}"
    admin = make_url(pg_url).set(drivername="postgresql")
    schema = admin.query["options"].split("=", 1)[1]
    libpq = admin.difference_update_query(["options"]).render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        conn.execute(f'GRANT ALL ON SCHEMA "{schema}" TO {role}')
    url = make_url(pg_url).set(username=role, password=password)
    try:
        yield url.render_as_string(hide_password=False), password
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '20s'")
            conn.execute(f"DROP OWNED BY {role} CASCADE")
            conn.execute(f"DROP ROLE {role}")


def files_holding(folder: Path, secret: bytes) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret in p.read_bytes()]


def rows_holding(url: str, secret: str) -> list[str]:
    """Every row of every table of the log, as text, that holds ``secret``."""
    import psycopg

    parsed = make_url(url).set(drivername="postgresql")
    schema = parsed.query["options"].split("=", 1)[1]
    found = []
    with psycopg.connect(parsed.render_as_string(hide_password=False)) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,))]
        assert {"events", "experiments", "driver_sessions"} <= set(tables)
        for table in tables:
            for (row,) in conn.execute(f'SELECT row_to_json(t)::text FROM "{schema}"."{table}" t'):
                if secret in row:
                    found.append(f"{table}: {row}")
    return found


def test_a_planted_password_never_shows(
    secret_role: tuple[str, str], tmp_path: Path
) -> None:
    url, secret = secret_role
    ray_tmp = Path(tempfile.mkdtemp(prefix="smsec-", dir="/tmp"))
    try:
        machine = {"HOME": str(tmp_path / "home"), "RAY_TMPDIR": str(ray_tmp)}
        (tmp_path / "home").mkdir()
        tried: list[str] = []

        def restore_without_the_password() -> None:
            log = tmp_path / "nopassword.log"
            ctl = tmp_path / "ctl"
            args = [str(tmp_path / "results"), "crash", str(ctl), "1", str(tmp_path / "x")]
            proc = start_driver(["restore", *args], log, Driver(env=machine))
            try:
                proc.wait(timeout=240)
            finally:
                kill_group(proc)
            tried.append(log.read_text())

        scenario = run_scenario(
            tmp_path, url, first=Driver(env=machine), after_kill=restore_without_the_password,
            second=Driver(env={**machine, "STATEMACHINE_DB_URL": url}),
        )
        # The restore without a password source stopped at once, saying where it looked.
        (refused,) = tried
        assert "CredentialsNotFoundError: the event log URL" in refused
        assert "STATEMACHINE_DB_URL (not set), PGPASSWORD (not set)" in refused
        assert not (tmp_path / "x").exists()
        # The first driver was killed while restore attempt 3 hung, after 2 failed ones (as in
        # the driver-crash test); so a failure below is the restored run's, not the first's.
        assert scenario.before == 3, (
            f"{scenario}\nthe restore without the password printed:\n{refused[-3000:]}")
        # With STATEMACHINE_DB_URL the restored run keeps its budgets as always.
        assert scenario.after == 2 and list(scenario.result.values()) == [["ERROR", 3]], (
            f"{scenario}\nthe restore without the password printed:\n{refused[-3000:]}")
        shown = make_url(url).render_as_string(hide_password=True)
        assert f"recording trial events of crash to {shown}" in scenario.log.read_text()

        runner = CliRunner()
        outputs = []
        (trial_id,) = scenario.result
        for args in (["experiments"], ["experiments", "--json"], ["trials", "crash"],
                     ["trials", "crash", "--json"], ["show", "crash", trial_id, "--json"],
                     ["explain", "crash", trial_id], ["verify", "--json"],
                     ["export", "crash"]):
            result = runner.invoke(cli, ["--db", url, *args])
            assert result.exit_code == 0, (args, result.output)
            outputs.append(result.stdout + result.stderr)
        bad = make_url(url).set(port=9).render_as_string(hide_password=False)
        failed = runner.invoke(cli, ["--db", bad, "experiments", "--json"])
        assert failed.exit_code == 2 and "error" in failed.stderr
        outputs.append(failed.stdout + failed.stderr)

        leaks = [o for o in [*outputs, scenario.log.read_text(), refused] if secret in o]
        leaks += files_holding(tmp_path, secret.encode())  # results (tuner.pkl...), homes
        leaks += files_holding(ray_tmp, secret.encode())  # Ray's session logs
        leaks += rows_holding(url, secret)
        assert leaks == []
        assert (tmp_path / "results" / "crash" / "tuner.pkl").exists()
        assert any((ray_tmp / "ray").glob("session_*/logs/*")), "no Ray logs were searched"
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
