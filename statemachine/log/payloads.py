"""The stored JSON text of an event's payload, by an encoder compiled once per event type.

The text is always exactly :func:`~statemachine.log.records.dump_json` of
:meth:`Event.to_payload() <statemachine.domain.events.Event.to_payload>` (sorted keys,
compact, lone surrogates escaped): a property test holds the two equal for every event type.
What is compiled is the common case: an event whose fields hold only text, integers,
booleans or ``None`` (a checkpoint, a first result, a start without a node) is written from
a template of its sorted field names, each value by the JSON encoder's own C string
encoder, in about a tenth of the generic encoder's time. Any other value (a failure, a
policy, a node, a config dict, a float, a subclass of ``str``) takes the generic path for
that event.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

from statemachine.domain.events import Event, encode_event
from statemachine.log.records import dump_json, storable_json

_Encoder = Callable[[Event], str]
_ENCODERS: dict[type[Event], _Encoder] = {}


def payload_json(event: Event) -> str:
    """The JSON text of ``event``'s payload, as the log stores it.

    Raises :class:`~statemachine.exceptions.StateMachineError` for an event type that is not
    registered in :data:`~statemachine.domain.events.EVENT_TYPES` (the log could not read it).
    """
    encode = _ENCODERS.get(type(event))
    if encode is None:
        encode_event(event)  # raises for an unregistered type, which is never compiled
        encode = _ENCODERS[type(event)] = _compile(type(event))
    return encode(event)


def _generic(event: Event) -> str:
    return dump_json(event.to_payload())


#: The JSON of a value of exactly one of these types (looked up by ``type(value)``, so a
#: ``bool`` is never taken for an ``int``, nor a ``str`` subclass for a ``str``).
#: ``encode_basestring`` is what ``json.JSONEncoder(ensure_ascii=False)`` writes text with.
_PLAIN: dict[type, Callable[[Any], str]] = {
    str: encode_basestring,
    type(None): lambda value: "null",
    bool: lambda value: "true" if value else "false",
    int: int.__repr__,
}


def _compile(cls: type[Event]) -> _Encoder:
    """The encoder of one event class: a template over its fields in sorted order."""
    names = sorted(f.name for f in dataclasses.fields(cls))
    if not names:
        return lambda event: "{}"
    # A field name is an identifier: its JSON key is '"name"', with no % to escape.
    template = "{" + ",".join(f'"{name}":%s' for name in names) + "}"
    plain = _PLAIN
    if len(names) == 1:
        get_one = operator.attrgetter(names[0])

        def encode_one(event: Event) -> str:
            value = get_one(event)
            convert = plain.get(type(value))
            if convert is None:
                return _generic(event)
            text = template % convert(value)
            return text if text.isascii() else storable_json(text)

        return encode_one
    get_all = operator.attrgetter(*names)

    def encode(event: Event) -> str:
        texts = []
        for value in get_all(event):
            convert = plain.get(type(value))
            if convert is None:
                return _generic(event)
            texts.append(convert(value))
        text = template % tuple(texts)
        return text if text.isascii() else storable_json(text)

    return encode
