"""Click types of the CLI's options: every value is checked when the command line is parsed,
so a bad one is exit code 2 with one line naming the option (never a traceback).

Numbers have ranges a real log can need and no more: a count beyond :data:`MAX_COUNT` or a
float that is NaN or infinite is refused, not passed on to code that would overflow.
"""

from __future__ import annotations

import math
from typing import Any, cast

import click

#: The largest count an option takes (an event position, ``tail -n``, a policy limit): the
#: largest BIGINT, what an event position can be.
MAX_COUNT = 2**63 - 1


def count(min_value: int = 0, max_value: int = MAX_COUNT) -> click.IntRange:
    """An integer option in ``[min_value, max_value]``."""
    return click.IntRange(min_value, max_value)


class FiniteFloat(click.FloatRange):
    """A float in a range, refusing NaN (which compares false to every bound) and infinity."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """Parse and range-check ``value``; NaN and infinity are refused."""
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


class AtType(click.types.StringParamType):
    """``--at``: an event position (an integer) or an ISO 8601 time (naive means UTC)."""

    name = "SEQ|TIME"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """Parse ``value`` into :class:`~statemachine.cli.reading.At`."""
        from statemachine.cli.db import BadInput
        from statemachine.cli.reading import At, parse_at

        if isinstance(value, At):
            return value
        try:
            return parse_at(str(value))
        except BadInput as exc:
            self.fail(str(exc).removeprefix("--at "), param, ctx)


class CauseRuleType(click.types.StringParamType):
    """``--on-cause CAUSE=ACTION``: a rule of the policy per cause of an actor's death."""

    name = "CAUSE=ACTION"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """Parse ``value`` into ``(cause, action)`` values; one line naming what is wrong."""
        from statemachine.domain.death import DeathCause
        from statemachine.domain.policy import CauseAction

        if isinstance(value, tuple):
            return value
        cause, action = _pair(self, str(value), "CAUSE=ACTION", param, ctx)
        causes = [c.value for c in DeathCause]
        if cause not in causes:
            self.fail(f"unknown cause {cause!r}; causes: {', '.join(causes)}.", param, ctx)
        actions = [a.value for a in CauseAction]
        if action not in actions:
            self.fail(f"unknown action {action!r} for {cause}; actions: {', '.join(actions)}.",
                      param, ctx)
        return cause, action


class CauseBudgetType(click.types.StringParamType):
    """``--cause-budget CAUSE=N``: how many failures of a cause are retried uncounted."""

    name = "CAUSE=N"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """Parse ``value`` into ``(cause, n)``; one line naming what is wrong."""
        from statemachine.domain.death import DeathCause

        if isinstance(value, tuple):
            return value
        cause, number = _pair(self, str(value), "CAUSE=N", param, ctx)
        causes = [c.value for c in DeathCause]
        if cause not in causes:
            self.fail(f"unknown cause {cause!r}; causes: {', '.join(causes)}.", param, ctx)
        budget = count(0, 2**31 - 1).convert(cast(Any, number), param, ctx)
        return cause, budget


class RepeatsType(click.types.StringParamType):
    """``--give-up-on-repeats N|off``: at least 2 identical failures in a row, or off."""

    name = "N|off"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """``off`` or an integer from 2: returned as ``0`` (off) or the integer."""
        if isinstance(value, int):
            return value
        if str(value).strip().lower() == "off":
            return 0
        return count(2, 2**31 - 1).convert(value, param, ctx)


def _pair(kind: click.types.StringParamType, value: str, form: str, param: click.Parameter | None,
          ctx: click.Context | None) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep or not name.strip() or not rest.strip():
        kind.fail(f"{value!r} is not {form}.", param, ctx)
    return name.strip(), rest.strip()
