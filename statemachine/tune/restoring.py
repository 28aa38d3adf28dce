"""``restoring()``: the user's code marks where its trial restores from a checkpoint.

A function trainable loads its checkpoint itself, after Ray's own restore has returned (for
Ray that restore only hands the checkpoint over), so to Ray a failure of that load is a
training failure. Inside ``with restoring():`` any exception is re-raised as a
:class:`~statemachine.RestoreError` that keeps the original's qualified type name, message and
traceback text and crosses the actor boundary intact (it pickles as plain strings). The
:class:`~statemachine.tune.EventLogCallback` then folds it through the restore rules: counted
against ``restore_retry_num`` of that checkpoint, not against ``max_failures``.

The driver learns that the restore succeeded from the attempt's first result (recorded as a
``FirstResult`` event), or from a failure raised outside the block (a training failure: the
restore before it had worked). It runs in the trial's process, imports nothing of Ray, and
changes nothing inside a class trainable (whose restore Ray already types).
"""

from __future__ import annotations

import functools
import traceback as tb
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

from statemachine.domain.classify import qualified_name
from statemachine.domain.failures import RestoreError, TrialError

_F = TypeVar("_F", bound=Callable[..., Any])


class _Restoring:
    """The context manager (and decorator) returned by :func:`restoring`."""

    def __enter__(self) -> _Restoring:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> Literal[False]:
        if exc is None or isinstance(exc, TrialError) or not isinstance(exc, Exception):
            # Done, already typed, or not a failure of the restore (KeyboardInterrupt,
            # SystemExit, a generator's exit): as it is.
            return False
        text = "".join(tb.format_exception(type(exc), exc, traceback))
        raise RestoreError(qualified_name(type(exc)), str(exc), text) from exc

    def __call__(self, func: _F) -> _F:
        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return wrapped  # type: ignore[return-value]


@overload
def restoring() -> _Restoring: ...


@overload
def restoring(func: _F) -> _F: ...


def restoring(func: Callable[..., Any] | None = None) -> Any:
    """Mark the user's restore from a checkpoint: its failures are restore failures.

    Use it around the code that loads the checkpoint, before the attempt's first
    ``tune.report``::

        ckpt = tune.get_checkpoint()
        if ckpt:
            with restoring():
                state = load_state(ckpt)

    or as a decorator of the loading function (``@restoring`` or ``@restoring()``). An
    exception raised inside becomes a :class:`~statemachine.RestoreError` (its cause chained);
    a :class:`~statemachine.TrialError` passes unchanged.
    """
    if func is None:
        return _Restoring()
    return _Restoring()(func)
