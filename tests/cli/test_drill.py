"""``trial-replay drill preempt``: bad input is one line and exit 2, and nothing is drained
or killed. (The drill itself runs on a real test cluster in
tests/cluster/test_cluster_causes.py.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cli.conftest import Run
from tests.cli.test_bad_input import assert_one_line_error

NODE = "5f" * 28


@pytest.mark.parametrize(("args", "fragments"), [
    (["not-a-node", "--address", "127.0.0.1:1"], ["'not-a-node' is not a Ray node id"]),
    ([NODE[:-2], "--address", "127.0.0.1:1"], ["is not a Ray node id", "56 hex digits"]),
    ([NODE, "--address", "127.0.0.1:1"],
     [f"no raylet of node {NODE} runs on this machine", "--no-kill"]),
    ([NODE, "--address", "127.0.0.1:1", "--deadline-s", "nan"], ["--deadline-s"]),
    ([NODE, "--address", "127.0.0.1:1", "--deadline-s", "-1"], ["--deadline-s"]),
    ([NODE], ["--address"]),
])
def test_bad_input_is_one_line(invoke: Callable[..., Run], monkeypatch: pytest.MonkeyPatch,
                               args: list[str], fragments: list[str]) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert_one_line_error(invoke("drill", "preempt", *args), *fragments)


def test_the_drill_prints_no_json(invoke: Callable[..., Run]) -> None:
    assert_one_line_error(invoke("--json", "drill", "preempt", NODE, "--address", "x:1"),
                          "prints no JSON")
