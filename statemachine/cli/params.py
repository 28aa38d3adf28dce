"""Click types of the CLI's options: every value is checked when the command line is parsed,
so a bad one is exit code 2 with one line naming the option (never a traceback).

Numbers have ranges a real log can need and no more: a count beyond :data:`MAX_COUNT` or a
float that is NaN or infinite is refused, not passed on to code that would overflow.
"""

from __future__ import annotations

import math
from typing import Any

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
