"""Snapshots: a trial's folded state at a sequence number, tagged with what folded it.

A snapshot is only a cache of a fold. It is trusted only when it was written by the same
state machine that would fold the events now: the tag combines the statemachine version with
a fingerprint of what the fold does, so a change to the machine makes older snapshots
ignored, never wrong. The fingerprint covers the compiled transition table (every trigger,
source, guard, effect and destination, in order), the code of every guard and effect (their
bytecode, constants and names, closures, and, recursively, every function and class of this
package they reach through their globals), the fold loop itself, :class:`TrialState`'s fields
and methods (its encoding included) and ``CHECKPOINT_HISTORY``. Renaming a local variable or
moving code between lines changes nothing; a changed guard body, helper or field does.
Bytecode differs between Python versions, so snapshots written under another Python are
ignored too (the trial is folded from its events, as without a snapshot).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import types
from collections.abc import Callable, Mapping
from typing import Any

from statemachine.domain import compiled
from statemachine.domain.state import CHECKPOINT_HISTORY, TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import EventDecodeError
from statemachine.log.records import dump_json, load_json, parse_json

_Table = Mapping[tuple[str, Status], tuple[Any, ...]]
_OWN_PACKAGE = "statemachine."
#: Class attributes that say nothing about behaviour, or that Python adds as a cache while
#: the process runs (``__slotnames__``: copyreg's, at the first pickle or copy of an instance).
_SKIPPED_ATTRIBUTES = frozenset(
    {"__doc__", "__module__", "__dict__", "__weakref__", "__annotations__",
     "__dataclass_fields__", "__dataclass_params__", "__static_attributes__",
     "__firstlineno__", "__orig_bases__", "__parameters__", "__slotnames__"}
)  # fmt: skip


class _Fingerprint:
    """A SHA-256 over the code and data a fold runs (each function and class once)."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._seen: set[int] = set()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def text(self, value: str) -> None:
        self._hash.update(value.encode("utf-8", "backslashreplace") + b"\0")

    def code(self, code: types.CodeType) -> None:
        self._hash.update(code.co_code)
        self.text(repr((code.co_names, code.co_freevars, code.co_cellvars, code.co_argcount,
                        code.co_kwonlyargcount)))  # fmt: skip
        for const in code.co_consts:
            self.const(const)

    def const(self, value: Any) -> None:
        if isinstance(value, types.CodeType):
            self.code(value)
        elif isinstance(value, (tuple, frozenset)):
            items = list(value)
            if isinstance(value, frozenset):  # set order depends on the hash seed
                items.sort(key=repr)
            self.text(f"{type(value).__name__}[{len(items)}]")
            for item in items:
                self.const(item)
        else:
            self.text(repr(value))

    def function(self, func: Callable[..., Any]) -> None:
        """A function's code and everything of this package it reaches."""
        self.text(f"def {getattr(func, '__qualname__', repr(type(func)))}")
        if not isinstance(func, types.FunctionType):
            return  # a builtin or C function: its name is all there is
        if id(func) in self._seen:
            return
        self._seen.add(id(func))
        self.code(func.__code__)
        for default in (func.__defaults__ or ()):
            self.value(default)
        for cell in func.__closure__ or ():
            self.value(cell.cell_contents)
        for name in sorted(_global_names(func.__code__)):
            if name in func.__globals__:
                self.text(f"global {name}")
                self.value(func.__globals__[name])

    def cls(self, cls: type) -> None:
        """A class of this package: its fields, methods and plain class attributes."""
        self.text(f"class {cls.__module__}.{cls.__qualname__}")
        if id(cls) in self._seen:
            return
        self._seen.add(id(cls))
        if dataclasses.is_dataclass(cls):
            for f in dataclasses.fields(cls):
                self.text(f"field {f.name}: {f.type}")
        for name, attr in sorted(vars(cls).items()):
            if name in _SKIPPED_ATTRIBUTES:
                continue
            self.text(f"attr {name}")
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, property):
                for accessor in (attr.fget, attr.fset):
                    if accessor is not None:
                        self.function(accessor)
            else:
                self.value(attr)

    def value(self, value: Any) -> None:
        """Anything a function reaches: code of this package is followed, data is named."""
        if isinstance(value, types.FunctionType):
            if (value.__module__ or "").startswith(_OWN_PACKAGE) or value.__module__ is None:
                self.function(value)
            else:
                self.text(f"def {value.__module__}.{value.__qualname__}")
        elif isinstance(value, type):
            if value.__module__.startswith(_OWN_PACKAGE):
                self.cls(value)
            else:
                self.text(f"class {value.__module__}.{value.__qualname__}")
        elif isinstance(value, enum.Enum):
            self.text(f"{type(value).__qualname__}.{value.name}={value.value!r}")
        elif isinstance(value, (str, int, float, bool, bytes, type(None))):
            self.text(repr(value))
        elif isinstance(value, (tuple, frozenset)):  # immutable: part of the code's meaning
            items = sorted(value, key=repr) if isinstance(value, frozenset) else value
            self.text(f"{type(value).__name__}[{len(items)}]")
            for item in items:
                self.value(item)
        elif isinstance(value, types.ModuleType):
            self.text(f"module {value.__name__}")
        elif callable(value) and hasattr(value, "__func__"):  # a bound method
            self.function(value.__func__)
        else:
            # Data (a dict, a list or set a module fills as a cache, a logger, the table
            # itself): its type, never its contents (they change as the process runs) or
            # its address.
            self.text(f"object {type(value).__module__}.{type(value).__qualname__}")


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def fingerprint(
    table: _Table | None = None,
    *,
    state_type: type = TrialState,
    history: int = CHECKPOINT_HISTORY,
) -> str:
    """12 hex digits naming what a fold through ``table`` does (default: the live table).

    Equal for the same code on the same Python, whatever the hash seed; different when a
    guard, an effect, a helper they call, the fold loop, the state's fields or methods, or
    ``history`` change.
    """
    table = compiled.TABLE if table is None else table
    fp = _Fingerprint()
    fp.text(f"history={history}")
    fp.value(state_type)
    for (trigger, source), branches in sorted(table.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        for conditions, effects, dest in branches:
            fp.text(f"{trigger}|{source.value}|{dest}")
            for func, target in conditions:
                fp.text(f"guard {func.__name__}={target}")
                fp.function(func)
            for func in effects:
                fp.text(f"effect {func.__name__}")
                fp.function(func)
    for fold in (compiled.apply_compiled, compiled.fold_compiled, encode_state, decode_state):
        fp.function(fold)
    return fp.hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def machine_version() -> str:
    """``<statemachine version>+<fingerprint of the fold>`` (at most 32 chars)."""
    from statemachine import __version__  # late: statemachine/__init__ may import this package

    return f"{__version__[:19]}+{fingerprint()}"


def encode_state(state: TrialState) -> str:
    """The stored form of a state."""
    return dump_json(state.to_dict())


def decode_state(text: str, trial_id: str) -> TrialState:
    """Rebuild a stored state, or raise :class:`EventDecodeError`."""
    try:
        data = parse_json(text)
    except (TypeError, ValueError):
        data = load_json(text, f"snapshot of trial {trial_id!r}")  # raises, naming the trial
    try:
        return TrialState.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise EventDecodeError(f"snapshot of trial {trial_id!r} is invalid: {exc}") from None
