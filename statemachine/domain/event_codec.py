"""The payload codec of events: an event's fields to JSON and back, checked by type hints.

:meth:`Event.to_payload <statemachine.domain.events.Event.to_payload>` and
:meth:`Event.from_payload <statemachine.domain.events.Event.from_payload>` run through here.
A class's decoder is compiled once from its dataclass fields and type hints (reading a log
decodes every event, so the per-field checks are resolved once, not per event); the field
types it knows are those events carry: ``str``, ``int``, ``bool``, string tuples, string-keyed
dicts, :class:`TrialError`, :class:`NodeRef`, :class:`ActorDeath`, :class:`RetryPolicy`, each
optional too.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from statemachine.domain.death import ActorDeath
from statemachine.domain.failures import TrialError
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from statemachine.exceptions import EventDecodeError, PolicyError

__all__ = ["decoder_of", "payload_of"]


def payload_of(event: Any) -> dict[str, Any]:
    """The JSON payload of an event dataclass (its fields, without type and version)."""
    cls = type(event)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(event))
    return {name: _to_json(getattr(event, name)) for name in names}


def decoder_of(cls: Any) -> Callable[[Mapping[str, Any]], Any]:
    """The payload decoder of an event class (compiled on first use): raises
    :class:`EventDecodeError` naming the field for an unknown or missing field or a value of
    the wrong type."""
    return _DECODERS.get(cls) or _compile_decoder(cls)


#: Each event class's field names (``dataclasses.fields`` builds its tuple on every call).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _to_json(value: Any) -> Any:
    if isinstance(value, (TrialError, RetryPolicy, NodeRef, ActorDeath)):
        return value.to_dict()
    if isinstance(value, tuple):
        return list(value)
    return value


_Convert = Callable[[Any], Any]
_DECODERS: dict[type, Callable[[Mapping[str, Any]], Any]] = {}


def _compile_decoder(cls: Any) -> Callable[[Mapping[str, Any]], Any]:
    """Build (once per class) the payload decoder of an event class from its type hints.

    Reading a log decodes every event, so the per-field checks are resolved here, not per
    event.
    """
    resolved = typing.get_type_hints(cls)
    convert = {
        f.name: _converter(cls.type_name, f.name, resolved[f.name])
        for f in dataclasses.fields(cls)
    }
    known = frozenset(convert)
    required = cls.required
    type_name = cls.type_name

    def decode(payload: Mapping[str, Any]) -> Any:
        if not known.issuperset(payload):
            unknown = ", ".join(sorted(set(payload) - known))
            raise EventDecodeError(
                f"event {type_name!r} payload has unknown field(s): {unknown}"
            )
        missing = [name for name in required if name not in payload]
        if missing:
            raise EventDecodeError(
                f"event {type_name!r} payload lacks field(s): {', '.join(missing)}"
            )
        return cls(**{name: convert[name](value) for name, value in payload.items()})

    _DECODERS[cls] = decode
    return decode


def _converter(type_name: str, name: str, hint: Any) -> _Convert:
    """A function that checks a payload value against ``hint`` and converts it back."""
    described = hint.__name__ if isinstance(hint, type) else str(hint)

    def bad(value: Any) -> EventDecodeError:
        return EventDecodeError(
            f"event {type_name!r} field {name!r} has an invalid value {value!r} "
            f"(expected {described})"
        )

    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        optional = type(None) in options
        (hint,) = [option for option in options if option is not type(None)]
    origin = typing.get_origin(hint)
    convert: _Convert
    if hint is TrialError:

        def convert(value: Any) -> Any:
            if not isinstance(value, Mapping):
                raise bad(value)
            return TrialError.from_dict(dict(value))

    elif hint is NodeRef:

        def convert(value: Any) -> Any:
            if not isinstance(value, Mapping):
                raise bad(value)
            try:
                return NodeRef.from_dict(value)
            except EventDecodeError as exc:
                raise EventDecodeError(f"event {type_name!r} field {name!r}: {exc}") from None

    elif hint is ActorDeath:

        def convert(value: Any) -> Any:
            if not isinstance(value, Mapping):
                raise bad(value)
            try:
                return ActorDeath.from_dict(value)
            except EventDecodeError as exc:
                raise EventDecodeError(f"event {type_name!r} field {name!r}: {exc}") from None

    elif hint is RetryPolicy:

        def convert(value: Any) -> Any:
            if not isinstance(value, Mapping):
                raise bad(value)
            try:
                return RetryPolicy.from_dict(value)
            except (PolicyError, TypeError) as exc:
                raise EventDecodeError(f"event {type_name!r} field {name!r}: {exc}") from None

    elif origin is tuple:

        def convert(value: Any) -> Any:
            if not isinstance(value, (list, tuple)) or not all(
                isinstance(v, str) for v in value
            ):
                raise bad(value)
            return tuple(value)

    elif origin is dict:

        def convert(value: Any) -> Any:
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise bad(value)
            return dict(value)

    elif hint is bool:

        def convert(value: Any) -> Any:
            if value is not True and value is not False:
                raise bad(value)
            return value

    elif hint in (str, int):

        def convert(value: Any) -> Any:
            if not isinstance(value, hint) or isinstance(value, bool):
                raise bad(value)
            return value

    else:
        raise TypeError(f"event {type_name!r} field {name!r}: unsupported type {hint!r}")
    if optional:
        required_convert = convert

        def convert(value: Any) -> Any:
            return None if value is None else required_convert(value)

    return convert
