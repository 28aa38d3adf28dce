"""Type a failure from its text alone: the error Ray wrote into a trial's ``error.txt``.

The text counterpart of :func:`statemachine.domain.classify.classify`, for histories
reconstructed from Ray's files (``trial-replay ingest``), where no exception object exists
any more: only ``str(exc)`` as Ray appended it. This module only reads the text; the rules are
:func:`~statemachine.domain.classify.classify_raised`'s (docs/design.md "Typed failures"),
given what the text says:

1. the error's last exception line names one of this package's failures
   (``statemachine.domain.failures.RestoreError: builtins.OSError: ...``, raised by
   ``statemachine.tune.restoring()``): that failure, as it was raised;
2. the exception's type (or a base class of a Python exception, short or qualified name)
   is listed as fatal, or is Tune's ``_AbortTrialExecution``: :class:`AbortError` (the bases
   of a user's own exception class are not in the text: only its name counts);
3. raised while restoring: ``phase`` is ``RESTORING``, or the text says so (Ray's header
   ``ray::<Trainable>.restore()``, or a frame in ``restore``, ``load_checkpoint`` or
   ``restoring()``): :class:`RestoreError`;
4. an actor death (``The actor died ...``, ``RayActorError``, ``ActorDiedError``,
   ``ActorUnavailableError``): :class:`ActorError`, preempted when Ray's text says the actor's
   node was preempted (:func:`preempted_text`);
5. anything else: :class:`TrainingError` of the last exception line's type.

Pure: no Ray, no I/O. Type names are qualified as :func:`~statemachine.domain.classify.
qualified_name` writes them (Python's traceback leaves ``builtins``/``__main__`` out).
"""

from __future__ import annotations

import builtins
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from statemachine.domain.classify import Raised, classify_raised
from statemachine.domain.failures import FAILURE_KINDS, ActorError, TrialError
from statemachine.domain.status import Status

__all__ = ["ErrorText", "classify_text", "named_exception", "parse_error_text",
           "preempted_text", "strip_ansi"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Ray's first line of a remote error: ``ray::Flaky.train() (pid=9633, ip=10.0.0.2, ...)``.
_RAY_CALL = re.compile(r"^ray::(?P<actor>[^\s(]+?)\.(?P<method>[A-Za-z_]\w*)\(\)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line \d+, in (?P<function>\S+)')
_EXCEPTION_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w]*(?:\.[A-Za-z_<>][\w<>]*)*)(?::(?: (?P<message>.*))?)?$"
)
_RESTORE_FUNCTIONS = frozenset({"restore", "load_checkpoint", "restoring"})
_ACTOR_TYPES = {
    "RayActorError": "ray.exceptions.RayActorError",
    "ActorDiedError": "ray.exceptions.ActorDiedError",
    "ActorUnavailableError": "ray.exceptions.ActorUnavailableError",
}
_ACTOR_OPENINGS = (
    ("The actor died", "ray.exceptions.ActorDiedError"),
    ("The actor experienced an error", "ray.exceptions.RayActorError"),
)
#: What Ray's own messages say of an actor whose node was preempted (its GCS and raylet, 2.40
#: to 2.60). Not a bare "preempted": Ray's message for any dead node says it "can happen if
#: the node was preempted".
_PREEMPTED = re.compile(r"the actor's node was preempted|Actor died by preemption|"
                        r"failed due to node preemption", re.IGNORECASE)
_FAILURES_MODULE = "statemachine.domain.failures"


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (Ray colours the ``ray::`` line)."""
    return _ANSI.sub("", text)


@dataclass(frozen=True)
class ErrorText:
    """What a failure's text says, read without any exception object.

    ``call``: the Ray actor method that raised (``train``, ``restore``, ...; ``None`` when
    the text has no ``ray::`` line); ``exception_type``: the qualified type of its last
    exception line (``None``: none found, e.g. an actor death); ``message``: that line's
    message (or the text's first line); ``restoring``: a frame or the call says the failure
    happened in a restore; ``actor_type``: Ray's actor-death type when it is one.
    """

    text: str
    call: str | None
    exception_type: str | None
    message: str
    restoring: bool
    actor_type: str | None


def _qualified(name: str) -> str:
    if "." in name:
        return name
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{name}"
    return f"__main__.{name}"


def parse_error_text(text: str) -> ErrorText:
    """Read a failure's text (colour codes removed) into an :class:`ErrorText`."""
    clean = strip_ansi(text).strip("\n")
    lines = clean.splitlines()
    first = next((line.strip() for line in lines if line.strip()), "")
    call_match = _RAY_CALL.match(first)
    call = call_match.group("method") if call_match else None
    restoring = call == "restore"
    last_frame = -1
    for index, line in enumerate(lines):
        frame = _FRAME.match(line)
        if frame is None:
            continue
        last_frame = index
        function = frame.group("function")
        if function in _RESTORE_FUNCTIONS or frame.group("file").endswith(
            "statemachine/tune/restoring.py"
        ):
            restoring = True
    exception_type: str | None = None
    message = first
    # The exception line is the first unindented line after the last frame (its message may
    # run over the lines after it); without frames, only a ``Type: message`` line counts.
    for index in range(last_frame + 1, len(lines)):
        line = lines[index]
        if not line or line[0].isspace() or (index == 0 and call is not None):
            continue
        match = _EXCEPTION_LINE.match(line)
        if match is None:
            continue
        if last_frame < 0 and match.group("message") is None:
            continue  # a bare word, not an exception line
        exception_type = _qualified(match.group("type"))
        rest = [match.group("message") or "", *lines[index + 1:]]
        message = "\n".join(rest).strip()
        break
    actor_type = None
    short = exception_type.rsplit(".", 1)[-1] if exception_type else None
    if short in _ACTOR_TYPES:
        actor_type = _ACTOR_TYPES[short]
    else:
        for opening, name in _ACTOR_OPENINGS:
            if first.startswith(opening):
                actor_type = name
        if actor_type is None and " is unavailable: " in first and first.startswith("The actor"):
            actor_type = "ray.exceptions.ActorUnavailableError"
    return ErrorText(clean, call, exception_type, message, restoring, actor_type)


class _Named(Exception):
    """Base of the stand-ins for an exception known only by the name its text gives."""

    _message = ""

    def __str__(self) -> str:
        return self._message


@functools.lru_cache(maxsize=256)
def _stand_in(type_name: str) -> type[BaseException]:
    """A class named ``type_name`` (qualified): a subclass of Python's own exception of
    that name, so its bases count as the real one's do (``TimeoutError`` is an
    ``OSError``); for any other name, of :class:`Exception` (a user's bases are not in the
    text)."""
    module, _, short = type_name.rpartition(".")
    real = getattr(builtins, short, None) if module == "builtins" else None
    base = real if isinstance(real, type) and issubclass(real, BaseException) else _Named
    return type(short, (base,), {"__module__": module or "builtins", "__qualname__": short,
                                 "__str__": _Named.__str__, "_message": ""})


def named_exception(type_name: str, message: str) -> BaseException:
    """An exception of the class ``type_name`` names whose ``str()`` is ``message``: what
    :func:`~statemachine.domain.classify.classify_raised` reads, built from text alone."""
    cls = _stand_in(type_name)
    exc = cls.__new__(cls)
    exc._message = message  # type: ignore[attr-defined]
    return exc


def preempted_text(text: str) -> bool:
    """Whether an actor death's text says its node was preempted (Ray's own words)."""
    return _PREEMPTED.search(text) is not None


def _carried(parsed: ErrorText) -> TrialError | None:
    """Rule 1: the text's last exception is one of this package's typed failures."""
    name = parsed.exception_type
    if name is None:
        return None
    module, _, kind = name.rpartition(".")
    if kind not in FAILURE_KINDS or module not in (_FAILURES_MODULE, "statemachine",
                                                    "__main__"):
        return None
    # A TrialError's message is "<cause_type>: <message>" (or the cause type alone).
    cause, sep, message = parsed.message.partition(": ")
    if not re.fullmatch(r"[A-Za-z_][\w.<>]*", cause):
        cause, message = "unknown", parsed.message
    elif not sep:
        message = ""
    cls = FAILURE_KINDS[kind]
    if cls is ActorError:
        return ActorError(cause, message, parsed.text, preempted=preempted_text(parsed.text))
    return cls(cause, message, parsed.text)


def classify_text(
    text: str, phase: Status = Status.RUNNING, fatal_types: Iterable[str] = ()
) -> TrialError:
    """Type the failure whose text Ray wrote (``error.txt``), raised while in ``phase``.

    The rules are the domain's own, :func:`~statemachine.domain.classify.classify_raised`,
    given what the text says (see the module's docstring): a typed failure it carries, an
    exception of the type it names, restoring when it says so, an actor death's
    ``preempted``. The returned failure's ``traceback`` is the text without colour codes; a
    text that names no type gives ``cause_type`` ``unknown``.
    """
    parsed = parse_error_text(text)
    carried = _carried(parsed)
    type_name = parsed.exception_type or parsed.actor_type
    exc = named_exception(type_name or "builtins.Exception", parsed.message)
    raised = Raised(exc, exc, parsed.text or None,
                    preempted=preempted_text(parsed.text) if parsed.actor_type else None,
                    carried=carried)
    error = classify_raised(raised, Status.RESTORING if parsed.restoring else phase,
                            fatal_types)
    error.traceback = parsed.text
    if type_name is None and carried is None:
        error.cause_type = "unknown"
    return error
