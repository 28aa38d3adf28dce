"""The callback's log URL in the experiment state: saved without its password, found again.

Tune pickles the callback into ``tuner.pkl``, which Ray uploads with the experiment (to shared
cloud storage on a cluster). So the URL is saved without its password, with a flag saying it
had one. Unpickled in the process that made it (Ray copies its configs), the password comes
from this process's memory; in a new driver (``Tuner.restore``) from the environment
(:func:`statemachine.log.credentials.with_password`), and when it is nowhere
:class:`~statemachine.exceptions.CredentialsNotFoundError` says where it looked.
"""

from __future__ import annotations

from typing import Any

from statemachine.log.credentials import with_password, without_password

# URL without password -> the full URL, for copies made in this process only.
_known: dict[str, str] = {}


def saved(url: str | None) -> dict[str, Any]:
    """The state keys that stand for ``url``: never its password."""
    if url is None:
        return {"url": None}
    bare, had_password = without_password(url)
    if had_password:
        _known[bare] = url
    return {"url": bare, "url_had_password": had_password}


def restored(state: dict[str, Any]) -> str | None:
    """The usable URL for the state :func:`saved` made (raises when its password is lost)."""
    url: str | None = state.get("url")
    if url is None or not state.get("url_had_password"):
        return url
    full = _known.get(url) or with_password(url)
    _known[url] = full
    return full
