"""The base of every trial event (:mod:`statemachine.domain.events` holds the types)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from statemachine.domain.event_codec import decoder_of, payload_of


@dataclass(frozen=True)
class Event:
    """Base of all trial events.

    Class attributes:
        type_name: the stable name stored in the log.
        version: the payload schema version of this type.
        trigger: the state machine trigger this event fires.
    """

    type_name: ClassVar[str] = "Event"
    version: ClassVar[int] = 1
    trigger: ClassVar[str] = ""

    def to_payload(self) -> dict[str, Any]:
        """The JSON payload of this event (without its type and version)."""
        return payload_of(self)

    #: Payload fields that must be present (their defaults are only placeholders).
    required: ClassVar[tuple[str, ...]] = ()
    #: Fields added after version 1: ``{field: the version that introduced it}``.
    since: ClassVar[dict[str, int]] = {}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Event:
        """Rebuild an event of this type from its payload, checking every field's type.

        Raises :class:`EventDecodeError` naming the field for an unknown or missing field or a
        value of the wrong type.
        """
        decoded: Event = decoder_of(cls)(payload)
        return decoded
