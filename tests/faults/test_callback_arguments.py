"""``EventLogCallback`` arguments that can never work are refused when it is made.

Before, each of these was accepted, the error came at the first trial (after Ray had started),
and ``fit()`` returned normally with nothing recorded. Now the constructor raises a
``ConfigurationError`` naming the argument and the fix, on one line, before Ray starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statemachine.exceptions import ConfigurationError
from tests.faults.faultkit import Figures

pytestmark = [pytest.mark.faults]

#: (arguments, what the one-line message must say besides the argument's name)
BAD: list[tuple[str, dict[str, Any], list[str]]] = [
    ("mysql", {"url": "mysql://x/y"}, ["SQLite and PostgreSQL only", "sqlite:///"]),
    ("storage URI", {"url": "s3://bucket/exp"}, ["storage", "storage_path"]),
    ("not text", {"url": 123}, ["int", "sqlite:///"]),
    ("directory", {"url": "{tmp}"}, ["is a folder", "statemachine.db"]),
    ("directory URL", {"url": "sqlite:///{tmp}"}, ["is a folder", "statemachine.db"]),
    ("timeout text", {"busy_timeout_ms": "10"}, ["str", "milliseconds"]),
    ("timeout 1e30", {"busy_timeout_ms": 1e30}, ["float", "milliseconds"]),
    ("timeout True", {"busy_timeout_ms": True}, ["bool", "milliseconds"]),
    ("timeout nan", {"busy_timeout_ms": float("nan")}, ["nan", "milliseconds"]),
    ("timeout negative", {"busy_timeout_ms": -1}, [">= 0", "milliseconds"]),
    ("timeout huge", {"busy_timeout_ms": 2**40}, ["2147483647", "milliseconds"]),
    ("policy", {"policy": {"max_failures": 3}}, ["RetryPolicy", "dict"]),
]


def _filled(kwargs: dict[str, Any], tmp: Path) -> dict[str, Any]:
    return {k: v.format(tmp=tmp) if isinstance(v, str) else v for k, v in kwargs.items()}


@pytest.mark.parametrize(("case", "kwargs", "says"), BAD, ids=[b[0] for b in BAD])
def test_an_argument_that_can_never_work_is_refused_at_construction(
    case: str, kwargs: dict[str, Any], says: list[str], tmp_path: Path
) -> None:
    import ray

    from statemachine.tune import EventLogCallback

    assert not ray.is_initialized()
    kwargs = _filled(kwargs, tmp_path)
    with pytest.raises(ConfigurationError) as raised:
        EventLogCallback(**kwargs)
    message = str(raised.value)
    (name,) = kwargs
    assert message.startswith(f"EventLogCallback({name}="), message
    assert "\n" not in message, message
    for words in says:
        assert words in message, (words, message)
    assert not ray.is_initialized()
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_good_arguments_are_kept(tmp_path: Path, reliability: Callable[[Figures], None]) -> None:
    """What works is still taken as given (a path-like URL as its text)."""
    from statemachine import RetryPolicy
    from statemachine.tune import EventLogCallback

    for url in (None, "", f"sqlite:///{tmp_path}/log.db", str(tmp_path / "log.db"),
                "relative.db", "postgresql://user@db.example.com/runs",
                "postgresql+psycopg://user:secret@db.example.com:5433/runs"):
        assert EventLogCallback(url=url).url == url
    assert EventLogCallback(url=tmp_path / "log.db").url == str(tmp_path / "log.db")
    for timeout in (None, 0, 300, 2**31 - 1):
        assert EventLogCallback(busy_timeout_ms=timeout).busy_timeout_ms == timeout
    policy = RetryPolicy(max_failures=2)
    assert EventLogCallback(policy=policy).policy is policy
    reliability(Figures(
        scenario="Callback arguments that can never work",
        injected="EventLogCallback(url=) 'mysql://x/y', 's3://bucket/exp', 123, a folder (path "
                 "and sqlite URL); busy_timeout_ms= '10', 1e30, True, nan, -1, 2**40; "
                 "policy= a dict (test_callback_arguments.py)",
        times=len(BAD), events_written=0, events_lost=0, duplicates=0,
        verify="each a ConfigurationError at construction, one line naming the argument "
               "and the fix, before Ray starts; nothing created",
    ))
