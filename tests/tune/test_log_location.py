"""Where the log lives, as a Tune user sees it: a network folder is warned about once, and the
callback saved with the experiment holds no password yet finds it again at restore."""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from tune_trainables import Flaky

from statemachine.log import mounts
from tests.tune.tunekit import REPO

SECRET = "pl4nted-Secret"
URL = f"postgresql+psycopg://alice:{SECRET}@db.example.com:5433/runs"


@pytest.mark.ray
def test_a_log_on_a_network_filesystem_is_warned_about_once(
    ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ray import tune

    from statemachine.tune import EventLogCallback, RunConfig

    results = tmp_path / "results"
    results.mkdir()
    # This machine's mount table with the results folder as an NFS share, as a cluster
    # node's table has it (the real line of an NFS v4.2 mount).
    table = tmp_path / "mountinfo"
    table.write_text(
        mounts.MOUNTINFO.read_text()
        + f"900 1 0:99 / {results} rw,relatime shared:99 - nfs4 fileserver:/export/results "
        "rw,vers=4.2,rsize=1048576,wsize=1048576,hard,proto=tcp,sec=sys\n"
    )
    monkeypatch.setattr(mounts, "MOUNTINFO", table)
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    with caplog.at_level(logging.WARNING, logger="statemachine"):
        tune.Tuner(
            Flaky,
            param_space={"ctl": str(ctl), "iters": 2, "variant": tune.grid_search([{}, {}])},
            run_config=RunConfig(name="onnfs", storage_path=str(results), verbose=0,
                                 callbacks=[EventLogCallback()]),
        ).fit()
    warnings = [r.getMessage() for r in caplog.records if "filesystem" in r.getMessage()]
    assert len(warnings) == 1, warnings
    (warning,) = warnings
    assert f"{results / 'onnfs' / 'statemachine.db'} is on a nfs4 filesystem" in warning
    assert "fileserver:/export/results" in warning
    assert "PostgreSQL" in warning and "local disk" in warning


def test_a_log_on_a_local_disk_is_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from statemachine.tune.store_url import warn_if_network_filesystem

    with caplog.at_level(logging.WARNING, logger="statemachine"):
        warn_if_network_filesystem(f"sqlite:///{tmp_path / 'statemachine.db'}")
        warn_if_network_filesystem("postgresql+psycopg://u@h/d")
    assert not caplog.records


def restore_in_a_new_process(pickled: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Unpickle the callback in a new driver process with exactly ``env`` (plus PATH)."""
    code = (
        "import pickle, sys\n"
        f"callback = pickle.loads(open({str(pickled)!r}, 'rb').read())\n"
        f"print('usable' if callback.url == {URL!r} else 'no password' "
        f"if callback.url == {URL.replace(':' + SECRET, '')!r} else 'other')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(REPO), **env}, check=False,
    )


def test_the_pickled_callback_holds_no_password_and_finds_it_at_restore(
    tmp_path: Path,
) -> None:
    from statemachine.tune import EventLogCallback

    data = pickle.dumps(EventLogCallback(url=URL))
    assert SECRET.encode() not in data
    assert pickle.loads(data).url == URL  # a copy in the same process keeps it
    pickled = tmp_path / "callback.pkl"
    pickled.write_bytes(data)
    home = tmp_path / "home"
    home.mkdir()

    # A new driver: from STATEMACHINE_DB_URL naming the same database and user.
    same = URL.replace("postgresql+psycopg", "postgresql")
    done = restore_in_a_new_process(pickled, {"HOME": str(home), "STATEMACHINE_DB_URL": same})
    assert done.stdout.strip() == "usable", done.stderr

    # From libpq's own sources: the URL stays without it, psycopg reads them itself.
    done = restore_in_a_new_process(pickled, {"HOME": str(home), "PGPASSWORD": SECRET})
    assert done.stdout.strip() == "no password", done.stderr
    (home / ".pgpass").write_text(f"db.example.com:5433:runs:alice:{SECRET}\n")
    (home / ".pgpass").chmod(0o600)
    done = restore_in_a_new_process(pickled, {"HOME": str(home)})
    assert done.stdout.strip() == "no password", done.stderr

    # Nowhere: one clear line naming where it looked, never the password.
    (home / ".pgpass").unlink()
    done = restore_in_a_new_process(pickled, {"HOME": str(home)})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("statemachine.exceptions.CredentialsNotFoundError: the event log "
                           "URL postgresql+psycopg://alice@db.example.com:5433/runs needs")
    assert "STATEMACHINE_DB_URL (not set), PGPASSWORD (not set)" in last
    assert f"{home / '.pgpass'} (no such file)" in last
    assert SECRET not in done.stderr


def test_a_url_without_password_pickles_as_it_is() -> None:
    from statemachine.tune import EventLogCallback

    for url in (None, "sqlite:////tmp/x.db", "postgresql+psycopg://postgres@127.0.0.1/test"):
        assert pickle.loads(pickle.dumps(EventLogCallback(url=url))).url == url
