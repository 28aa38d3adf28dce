"""The trial table's question as the address holds it: filters, sort and page.

``/e/EXP?status=ERROR&error=RestoreError&node=10.0.0.7&restore=1&q=00012&sort=failures&desc=1
&page=3``: the page and ``/api/e/EXP/trials`` read the same parameters, so a link (or a reload)
shows the same table. A value that is not one of the allowed ones is a :class:`BadQuery`
(400, one line naming the parameter and what it takes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from statemachine.cli.schema import STATUSES
from statemachine.cli.web.trial_query import ERROR_TYPES, PAGE_SIZE, SORTS

if TYPE_CHECKING:
    from statemachine.cli.web.trial_query import Page, TrialQuery

__all__ = ["BadQuery", "Listing", "parse_listing"]

#: The most characters a text parameter keeps (a name search, a node).
_MOST_TEXT = 200


class BadQuery(ValueError):
    """A parameter of the address that is not one the table takes."""


@dataclass(frozen=True)
class Listing:
    """Which trials the table shows, in which order, which page of them."""

    status: str | None = None
    error_type: str | None = None
    node: str | None = None
    has_restore_failures: bool | None = None
    search: str | None = None
    sort: str = "trial"
    descending: bool = False
    page: int = 1

    @property
    def filtered(self) -> bool:
        """Whether any filter is set."""
        return any(v is not None for v in (self.status, self.error_type, self.node,
                                           self.has_restore_failures, self.search))

    def params(self) -> dict[str, str]:
        """The parameters that differ from the defaults, as the address holds them."""
        pairs = {
            "status": self.status,
            "error": self.error_type,
            "node": self.node,
            "restore": None if self.has_restore_failures is None
            else ("1" if self.has_restore_failures else "0"),
            "q": self.search,
            "sort": None if self.sort == "trial" else self.sort,
            "desc": "1" if self.descending else None,
            "page": None if self.page == 1 else str(self.page),
        }
        return {k: v for k, v in pairs.items() if v is not None}

    def query(self, **changes: object) -> str:
        """``?status=ERROR&sort=failures`` for this listing with ``changes`` (``""``: none)."""
        params = replace(self, **changes).params()  # type: ignore[arg-type]
        return "?" + urlencode(params) if params else ""

    def sorted_by(self, sort: str) -> str:
        """The query that sorts by ``sort`` (again: the other way), from the first page."""
        descending = not self.descending if sort == self.sort else sort != "trial"
        return self.query(sort=sort, descending=descending, page=1)

    def fetch(self, query: TrialQuery, experiment: str) -> Page:
        """This listing's page of the experiment's trials."""
        return query.trials(
            experiment, status=self.status, error_type=self.error_type, node=self.node,
            has_restore_failures=self.has_restore_failures, search=self.search,
            sort=self.sort, descending=self.descending,
            offset=(self.page - 1) * PAGE_SIZE, limit=PAGE_SIZE,
        )


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name, "").strip()
    return value[:_MOST_TEXT] or None


def _choice(params: Mapping[str, str], name: str, allowed: tuple[str, ...] | list[str],
            default: str | None = None) -> str | None:
    value = _text(params, name)
    if value is None:
        return default
    if value not in allowed:
        raise BadQuery(f"parameter {name}={value[:40]!r} is not one of: {', '.join(allowed)}")
    return value


def parse_listing(params: Mapping[str, str]) -> Listing:
    """The listing an address asks for; raises :class:`BadQuery` for a value it cannot take."""
    restore = _choice(params, "restore", ("0", "1"))
    page_text = _text(params, "page") or "1"
    if not page_text.isdigit() or int(page_text) < 1 or len(page_text) > 9:
        raise BadQuery(f"parameter page={page_text[:40]!r} is not a page number (1, 2, ...)")
    return Listing(
        status=_choice(params, "status", STATUSES),
        error_type=_choice(params, "error", ERROR_TYPES),
        node=_text(params, "node"),
        has_restore_failures=None if restore is None else restore == "1",
        search=_text(params, "q"),
        sort=_choice(params, "sort", list(SORTS), "trial") or "trial",
        descending=_choice(params, "desc", ("0", "1")) == "1",
        page=int(page_text),
    )
