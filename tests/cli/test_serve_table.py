"""``trial-replay serve`` at scale, over real HTTP (issue 25 item 3, issue 29's web view): the
experiment page shows a page of trials filtered and sorted on the server, with status
counts; the JSON endpoints answer the same; ``/changes`` says what changed after a position;
the trial page numbers failures as ``explain`` does and names each attempt's checkpoint; the
nodes page groups by machine; the page stays the same size whatever the trial count."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from statemachine.domain.events import TrialAdded, TrialFailed, TrialStarted
from statemachine.domain.failures import TrainingError
from tests.cli.test_serve import _get, serving
from tests.cli.web_logs import EXPERIMENT, MACHINES, POLICY, expected_status, trial_name, write_many

TRIALS = 250
HOSTILE = {3: "<script>alert(1)</script>", 4: '"><img src=x onerror=alert(2)>'}


def name_of(n: int) -> str:
    return HOSTILE.get(n, trial_name(n))


@pytest.fixture(scope="module")
def many_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_many(tmp_path_factory.mktemp("many") / "statemachine.db", TRIALS,
                      names=HOSTILE)


@pytest.fixture(scope="module")
def served_many(many_db: Path) -> Iterator[str]:
    with serving(many_db, EXPERIMENT) as url:
        yield url


def _json(url: str) -> dict:  # type: ignore[type-arg]
    status, body = _get(url)
    assert status == 200, body
    return json.loads(body)  # type: ignore[no-any-return]


def _rows(page: str) -> list[str]:
    """The trial ids of the table's rows, as the page has them (HTML-escaped)."""
    return re.findall(r'<tr data-trial-id="([^"]*)">', page)


def test_the_page_shows_one_page_of_trials_and_links_the_next(served_many: str) -> None:
    status, page = _get(f"{served_many}/e/{EXPERIMENT}")
    assert status == 200
    ordered = [_escaped(name) for name in sorted(name_of(n) for n in range(TRIALS))]
    assert _rows(page) == ordered[:100]
    assert "Trials 1-100 of 250" in page and "page 1 of 3" in page
    assert f'href="/e/{EXPERIMENT}?page=2" rel="next"' in page
    status, third = _get(f"{served_many}/e/{EXPERIMENT}?page=3")
    assert _rows(third) == ordered[200:]
    assert "Trials 201-250 of 250" in third
    # every status counted, each a link to the table filtered on it
    want = {s: sum(expected_status(n) == s for n in range(TRIALS)) for s in ("RUNNING",
                                                                            "TERMINATED",
                                                                            "ERROR")}
    for status_name, count in want.items():
        assert (f'href="/e/{EXPERIMENT}?status={status_name}" data-status="{status_name}" '
                f'class="count {status_name}">{status_name} <b>{count}</b>') in page


def test_the_json_table_filters_sorts_and_paginates(served_many: str) -> None:
    api = f"{served_many}/api/e/{EXPERIMENT}/trials"
    whole = _json(api)
    assert (whole["total"], whole["pages"], len(whole["rows"])) == (TRIALS, 3, 100)
    errors = _json(api + "?status=ERROR")
    expected = [name_of(n) for n in range(TRIALS) if expected_status(n) == "ERROR"]
    assert errors["total"] == len(expected) == 36
    assert [r["trial_id"] for r in errors["rows"]] == sorted(expected)
    worst = _json(api + "?sort=failures&desc=1")["rows"]
    failures = [r["num_failures"] for r in worst]
    assert failures == sorted(failures, reverse=True) and failures[0] == 2
    restores = _json(api + "?restore=1")
    assert restores["total"] == sum(1 for n in range(TRIALS) if n % 5 == 0)
    assert all(r["total_restore_failures"] > 0 for r in restores["rows"])
    restore_errors = _json(api + "?error=RestoreError&sort=trial&desc=1")
    assert restore_errors["rows"] and all(r["last_error_type"] == "RestoreError"
                                          for r in restore_errors["rows"])
    ids = [r["trial_id"] for r in restore_errors["rows"]]
    assert ids == sorted(ids, reverse=True)
    on_node = _json(api + f"?node={MACHINES[1].node_ip}")
    assert on_node["total"] > 0
    assert all(r["last_failure_on"] == MACHINES[1].node_ip for r in on_node["rows"])
    found = _json(api + "?q=0024")
    assert [r["trial_id"] for r in found["rows"]] == ["trial_00024"] + [
        trial_name(n) for n in range(240, 250)]
    assert found["query"] == "?q=0024"
    assert _json(api + "?q=SCRIPT")["rows"][0]["trial_id"] == HOSTILE[3]  # any case
    # the HTML page answers the same address with the same rows
    page = _get(f"{served_many}/e/{EXPERIMENT}?status=ERROR&sort=failures&desc=1")[1]
    assert _rows(page) == [r["trial_id"] for r in _json(api + "?status=ERROR&sort=failures"
                                                              "&desc=1")["rows"]]
    assert "matching the filter" in page
    assert 'class="count ERROR chosen"' in page


@pytest.mark.parametrize("query, named", [
    ("status=BROKEN", "status='BROKEN'"), ("sort=name", "sort='name'"),
    ("error=Oops", "error='Oops'"),
    ("page=0", "page='0'"), ("page=x", "page='x'"), ("restore=yes", "restore='yes'"),
])
def test_a_parameter_the_table_cannot_take_is_400_naming_it(
    served_many: str, query: str, named: str
) -> None:
    status, body = _get(f"{served_many}/api/e/{EXPERIMENT}/trials?{query}")
    assert status == 400
    error = json.loads(body)["error"]
    assert named in error and "\n" not in error
    status, page = _get(f"{served_many}/e/{EXPERIMENT}?{query}")
    assert status == 400 and named.replace("'", "&#x27;") in page
    assert _get(f"{served_many}/api/e/{EXPERIMENT}/changes?since=-1")[0] == 400
    assert _get(f"{served_many}/api/e/nope/trials")[0] == 404


def test_hostile_names_are_escaped_in_the_table_and_their_links(served_many: str) -> None:
    status, page = _get(f"{served_many}/e/{EXPERIMENT}")
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert f'href="/e/{EXPERIMENT}/t/{quote(HOSTILE[4], safe="")}"' in page
    status, trial = _get(f"{served_many}/e/{EXPERIMENT}/t/{quote(HOSTILE[4], safe='')}")
    assert status == 200 and "<img src=x" not in trial
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in trial


def test_the_trial_page_numbers_failures_as_explain_and_names_each_restore(
    served_many: str, many_db: Path
) -> None:
    trial = trial_name(35)  # fails, retries its restore, fails again and gives up
    status, page = _get(f"{served_many}/e/{EXPERIMENT}/t/{trial}")
    assert status == 200
    explained = _json(f"{served_many}/api/e/{EXPERIMENT}/t/{trial}")
    assert explained["status"] == "ERROR"
    failures = page.split("<h2>Failures</h2>", 1)[1].split("<h2>", 1)[0]
    texts = [s["text"] for s in explained["steps"] if s["decision"]]
    assert "Restore failure # 1" in failures and len(texts) == 3
    for text in texts:  # explain's own words, in order
        assert failures.index(_escaped(text)) >= 0
    assert "Policy that applied: max_failures=1, restore_retry_num=2" in page
    attempts = page.split("<h2>Attempts and the checkpoint each restored</h2>", 1)[1]
    cells = re.findall(r"<tr><td>(\d)</td><td>([^<]*)</td><td>[^<]*</td><td>([^<]*)</td>"
                       r"<td>([^<]*)</td></tr>", attempts)
    assert cells == [
        ("1", "seq 3 epoch 1", "none: from scratch", "failed: TrainingError, RECOVER"),
        ("2", "seq 6 epoch 1", "c1", "failed: RestoreError, RETRY_RESTORE"),
        ("3", "seq 8 epoch 1", "c1", "failed: TrainingError, GIVE_UP"),
    ]
    assert '<svg class="timeline"' in page


def _escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_the_nodes_page_groups_by_machine(served_many: str) -> None:
    status, page = _get(f"{served_many}/e/{EXPERIMENT}/nodes")
    assert status == 200
    for machine in MACHINES:
        assert f'href="/e/{EXPERIMENT}?node={machine.node_ip}"' in page
        assert f">{machine.hostname}</a>" in page
    hosts = _json(f"{served_many}/api/e/{EXPERIMENT}/nodes")
    assert sorted(h["host"] for h in hosts) == sorted(m.node_ip for m in MACHINES)
    assert sum(h["trials"] for h in hosts) == TRIALS


def test_changes_since_a_position_name_the_trials_that_changed(tmp_path: Path) -> None:
    from statemachine.log import ExperimentLog

    db = write_many(tmp_path / "statemachine.db", 20)
    with serving(db, EXPERIMENT) as url:
        changes = f"{url}/api/e/{EXPERIMENT}/changes"
        now = _json(changes + "?since=0")
        assert len(now["changed"]) == 20
        position = now["position"]
        assert _json(f"{changes}?since={position}")["changed"] == []
        log = ExperimentLog.open(str(db), EXPERIMENT, POLICY)
        try:
            log.record("new_trial", TrialAdded())
            log.record("new_trial", TrialStarted())
            log.record(trial_name(1), TrialFailed(TrainingError("builtins.ValueError", "x")))
        finally:
            log.close()
        later = _json(f"{changes}?since={position}")
        assert sorted(later["changed"]) == ["new_trial", trial_name(1)]
        assert later["position"] > position and later["more"] is False
        table = _json(f"{url}/api/e/{EXPERIMENT}/trials?q=new")
        assert table["total"] == 1 and table["position"] == later["position"]


def _lean(db: Path, trials: int) -> Path:
    """``trials`` trials of two events each (the page's size depends on trials, not events)."""
    from statemachine.log import ExperimentLog

    log = ExperimentLog.open(str(db), EXPERIMENT, POLICY, sqlite_synchronous="OFF")
    try:
        for start in range(0, trials, 1000):
            log.record_many([item for n in range(start, min(start + 1000, trials))
                             for item in ((trial_name(n), TrialAdded()),
                                          (trial_name(n), TrialStarted(node=MACHINES[n % 3])))])
    finally:
        log.close()
    return db


def test_the_experiment_page_does_not_grow_with_the_trial_count(tmp_path: Path) -> None:
    """The page of 4,000 trials is the size of the page of 200 (one page of rows, a bounded
    timeline), far under the 2 MB a 100,000-trial experiment may take (benchmarks/web.py
    measures 100,000)."""
    sizes = {}
    for trials in (200, 4000):
        db = _lean(tmp_path / f"{trials}.db", trials)
        with serving(db, EXPERIMENT) as url:
            status, page = _get(f"{url}/e/{EXPERIMENT}")
            assert status == 200 and len(_rows(page)) == 100
            sizes[trials] = len(page.encode())
            api = _get(f"{url}/api/e/{EXPERIMENT}/trials")[1]
            assert len(api.encode()) < 2 * sizes[trials]
    assert sizes[4000] <= sizes[200] * 1.02 + 200, sizes
    assert sizes[4000] < 2_000_000
