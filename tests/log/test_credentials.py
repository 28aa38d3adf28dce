"""Secrets in URLs: hidden in messages, stripped from what is saved, found again at restore."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

import pytest

from statemachine.exceptions import CredentialsNotFoundError
from statemachine.log.credentials import (
    describe_url,
    redact_uri,
    with_password,
    without_password,
)
from statemachine.log.engine import describe

SECRET = "s3cr3t-Pa55"
URL = f"postgresql+psycopg://alice:{SECRET}@db.example.com:5433/runs"


def test_messages_never_show_a_password() -> None:
    for text in (
        URL,
        "postgresql+psycopg://alice@db.example.com/runs?password=" + SECRET,
        f"mysql://bob:{SECRET}@h/d",
    ):
        for shown in (describe_url(text), describe(text)):
            assert SECRET not in shown
            assert "***" in unquote(shown)


def test_the_saved_url_has_no_password_and_says_it_had_one() -> None:
    bare, had = without_password(URL)
    assert (bare, had) == ("postgresql+psycopg://alice@db.example.com:5433/runs", True)
    bare, had = without_password(f"{URL}?options=-csearch_path%3Dx&password={SECRET}")
    assert SECRET not in bare and had and "options=" in bare
    assert without_password("sqlite:////tmp/x.db") == ("sqlite:////tmp/x.db", False)
    assert without_password("/tmp/x.db") == ("/tmp/x.db", False)


def test_the_password_comes_back_from_statemachine_db_url() -> None:
    bare, _ = without_password(URL)
    env = {"STATEMACHINE_DB_URL": f"postgresql://alice:{SECRET}@db.example.com:5433/runs",
           "HOME": "/nonexistent"}
    assert with_password(bare, env=env) == URL


def test_another_database_in_statemachine_db_url_is_not_used() -> None:
    bare, _ = without_password(URL)
    env = {"STATEMACHINE_DB_URL": f"postgresql://alice:{SECRET}@db.example.com:5433/other",
           "HOME": "/nonexistent"}
    with pytest.raises(CredentialsNotFoundError) as info:
        with_password(bare, env=env)
    assert "names another database" in str(info.value)
    assert SECRET not in str(info.value)


def test_pgpassword_leaves_the_password_to_libpq() -> None:
    bare, _ = without_password(URL)
    assert with_password(bare, env={"PGPASSWORD": SECRET, "HOME": "/nonexistent"}) == bare


def test_a_pgpass_line_leaves_the_password_to_libpq(tmp_path: Path) -> None:
    bare, _ = without_password(URL)
    pgpass = tmp_path / ".pgpass"
    pgpass.write_text(f"# comment\nother:5433:runs:alice:x\ndb.example.com:*:runs:alice:{SECRET}\n")
    pgpass.chmod(0o600)
    assert with_password(bare, env={"HOME": str(tmp_path)}) == bare
    pgpass.chmod(0o644)  # libpq ignores a password file others can read
    with pytest.raises(CredentialsNotFoundError, match="permissions too open"):
        with_password(bare, env={"HOME": str(tmp_path)})


def test_nothing_found_is_one_line_naming_every_place(tmp_path: Path) -> None:
    bare, _ = without_password(URL)
    (tmp_path / "pass").write_text("other:*:*:*:x\n")
    os.chmod(tmp_path / "pass", 0o600)
    with pytest.raises(CredentialsNotFoundError) as info:
        with_password(bare, env={"PGPASSFILE": str(tmp_path / "pass")})
    message = str(info.value)
    assert "\n" not in message
    for place in ("STATEMACHINE_DB_URL (not set)", "PGPASSWORD (not set)",
                  f"{tmp_path / 'pass'} (no line for db.example.com:5433:runs:alice)",
                  "alice@db.example.com:5433/runs"):
        assert place in message


@pytest.mark.parametrize(
    ("uri", "kept"),
    [
        (f"s3://AKIAEXAMPLE:{SECRET}@bucket/runs", "s3://***@bucket/runs"),
        (f"s3://bucket/runs?region=eu-west-1&secret_key={SECRET}&access_key=AKIA",
         "s3://bucket/runs?region=eu-west-1&secret_key=***&access_key=***"),
        (f"gs://bucket/runs?token={SECRET}", "gs://bucket/runs?token=***"),
        ("s3://bucket/runs?endpoint_override=127.0.0.1:9000&scheme=http",
         "s3://bucket/runs?endpoint_override=127.0.0.1:9000&scheme=http"),
        ("/local/runs/exp", "/local/runs/exp"),
        ("bucket/runs/exp", "bucket/runs/exp"),
    ],
)
def test_storage_uris_lose_their_credentials(uri: str, kept: str) -> None:
    shown = redact_uri(uri)
    assert SECRET not in shown
    assert shown.replace("%3A", ":") == kept
