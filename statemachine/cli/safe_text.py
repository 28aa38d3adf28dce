"""The one place text from the log is made safe to show (issue 16, items 2 and 3).

Everything a trial id, an experiment name, an error message or a checkpoint path holds was
written by someone else: a training script, Ray, a file system. Shown to a person it must be
shown *literally*, and it must never act on the terminal:

- **Rich markup is never interpreted.** Human output is built from :class:`rich.text.Text`
  objects (:func:`cell`), never from markup strings, so ``[link=...]``, ``[rank0]`` or
  ``could not open [/mnt/ckpt]`` print as they are.
- **Control characters are shown escaped** (:func:`visible`): C0 and C1 controls, DEL, lone
  surrogates (what ``os.fsdecode`` gives for a non-UTF-8 file name), Unicode line and
  paragraph separators and the bidirectional overrides are written as Python-style escapes
  (``\\x1b``, ``\\n``, ``\\x9b``, ``\\udcff``, ``\\u202e``), so ``\\x1b]0;title\\x07`` or
  ``\\x1b[2J`` reach the terminal as the visible characters ``\\x1b[2J``. A backslash already
  in the text is shown as it is (paths stay readable); ``--json`` has the exact text.
- **JSON keeps the exact text**, JSON-escaped (:func:`json_safe`): the characters above are
  written as ``\\uXXXX`` escapes, which every JSON reader turns back into the same string.
- **Pictures**: :func:`xml_safe` for SVG/HTML (characters XML 1.0 cannot hold are replaced by
  their visible escape, so the file stays valid) and :func:`mathtext_safe` for matplotlib
  (a ``$`` is not mathtext).

Every human renderer of the CLI goes through :class:`statemachine.cli.output.Output`, which
calls these functions on every value it prints; a command never writes log text to the
terminal itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rich.text import Text

# C0 controls, DEL and C1 controls; lone surrogates; line/paragraph separators; the bidi
# embeddings, overrides and isolates (they reorder what follows them on the line) and the
# Arabic letter mark.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

# The same without C0: json.dumps escapes those inside strings already, and outside strings
# only its own indentation (newlines, spaces) is whitespace.
_JSON_UNSAFE = re.compile(
    "[\x7f-\x9f\ud800-\udfff\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)

# What XML 1.0 cannot hold at all (even as a character reference).
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(value: Any) -> str:
    """``value`` as text a terminal shows literally: control characters escaped.

    ``None`` is the empty string; anything else is ``str()``-ed first.
    """
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, text)


def cell(value: Any, style: str = "") -> Text:
    """A rich ``Text`` of ``value`` shown literally: no markup, no emoji codes, controls
    escaped. The one way log text enters a rich renderable."""
    return Text(visible(value), style=style)


def one_line(value: Any) -> str:
    """``value`` on one line: runs of whitespace (real newlines too) folded to one space,
    then control characters escaped. For stderr messages."""
    return visible(" ".join(str(value).split()))


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_safe(text: str) -> str:
    """A JSON document with every character :func:`visible` escapes written as ``\\uXXXX``.

    ``text`` must be JSON (from :func:`json.dumps`): the characters this touches can only sit
    inside its strings (JSON's own syntax is ASCII), so the document means exactly the same.
    ``json.dumps`` already escapes C0 controls; this adds DEL, C1, lone surrogates, the line
    separators and the bidi controls, which it would otherwise write raw.
    """
    return _JSON_UNSAFE.sub(_json_escape, text)


def xml_safe(value: Any) -> str:
    """Text for an SVG/HTML document: characters XML cannot hold shown as visible escapes;
    the rest (including C1 controls, which XML allows) escaped like the terminal's."""
    text = visible(value)
    return _XML_ILLEGAL.sub(_escape, text)


def mathtext_safe(value: Any) -> str:
    """Text for a matplotlib label: visible, and ``$`` escaped so it is never mathtext."""
    return visible(value).replace("$", r"\$")


#: A function that makes a value safe to show (one of the above).
Sanitiser = Callable[[Any], str]
