"""Why an actor died, asked of Ray after the failure was decided without it.

An actor failure whose exception says nothing of the cause (an ``ActorUnavailableError``, an
``ActorDiedError`` raised before the GCS knew) is decided with the cause ``unknown``, as Ray's
own accounting does. Then Ray is asked in the background, never on Tune's event loop: the node
table's death reason of the node the actor ran on, and the GCS actor table's death cause (what
the state API's ``death_cause`` shows; the state API itself when the table cannot tell) unless
it only says that the driver let the actor go (:data:`CLEANUP_CAUSES`), polled until one of
them answers or :data:`LATE_CAUSE_TIMEOUT_S` has passed. An answer is
handed back to the driver's thread (:meth:`LateCauses.learned`, at every step) and recorded
as :class:`~statemachine.domain.events.DeathCauseLearned`, which changes no decision.

On a Ray that records no cause at all (``compat.death_cause_support``) nothing is asked and
one warning says so: every cause stays ``unknown``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import DeathCauseLearned
from statemachine.domain.ray_causes import death_from_node_table, death_from_state_api
from statemachine.tune import compat
from statemachine.tune.ray_surface import deaths as ray_deaths

logger = logging.getLogger(__name__)

__all__ = ["LATE_CAUSE_TIMEOUT_S", "LateCauses"]

#: How long Ray is asked why an actor died (its node is declared dead after Ray's health
#: checks fail: about 30 s with Ray's defaults).
LATE_CAUSE_TIMEOUT_S = 60.0
#: How long the end of an experiment waits for answers still pending.
END_WAIT_S = 10.0
_POLL_S = 0.5
#: After this long without a cause in the actor table, the state API is asked (once: it
#: needs the dashboard, and says so in Ray's log when there is none).
_STATE_API_AFTER_S = 5.0

_warned_unsupported = False


#: What the GCS actor table says of an actor the driver itself let go after its failure
#: (Tune releases or kills a failed trial's actor): never why it failed. Seen on Ray 2.40: an
#: ``ActorUnavailableError`` for a node that was lost, the actor table saying
#: ``OUT_OF_SCOPE`` before the node was declared dead.
CLEANUP_CAUSES = frozenset({DeathCause.OUT_OF_SCOPE, DeathCause.KILLED})


def ask_ray(actor_id: str | None, node_id: str | None, asked_state_api: bool
            ) -> tuple[ActorDeath, str] | None:
    """One look: ``(death, source)`` once Ray tells why the actor died, else ``None``. The
    node's death comes first (the actor table may only say the driver let the actor go)."""
    if node_id:
        dead = ray_deaths.node_death(node_id)
        if dead is not None:
            death = death_from_node_table(*dead)
            if death.known:
                return death, "node_table"
    if actor_id:
        _, cause = ray_deaths.actor_table_death(actor_id)
        death = death_from_state_api(cause)
        if death.known and death.cause not in CLEANUP_CAUSES:
            return death, "state_api"
        if asked_state_api:
            death = death_from_state_api(ray_deaths.state_api_death(actor_id, _POLL_S * 4))
            if death.known and death.cause not in CLEANUP_CAUSES:
                return death, "state_api"
    return None


class LateCauses:
    """The lookups of one driver session, and the answers not recorded yet."""

    def __init__(self, timeout_s: float = LATE_CAUSE_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._answers: deque[tuple[str, DeathCauseLearned]] = deque()
        self._threads: list[threading.Thread] = []
        self._supported: bool | None = None

    def _can_ask(self) -> bool:
        if self._supported is None:
            why_not = compat.death_cause_support()
            self._supported = why_not is None
            global _warned_unsupported
            if why_not is not None and not _warned_unsupported:
                _warned_unsupported = True
                logger.warning("statemachine: %s; every actor death is recorded with the "
                               "cause 'unknown'", why_not)
        return self._supported

    def ask(self, trial_id: str, failure_seq: int, actor_id: str | None,
            node_id: str | None) -> None:
        """Ask Ray in the background why the actor of the failure at ``failure_seq`` died."""
        if not (actor_id or node_id) or not self._can_ask():
            return
        thread = threading.Thread(
            target=self._look, args=(trial_id, failure_seq, actor_id, node_id),
            name=f"statemachine-cause-{trial_id}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _look(self, trial_id: str, failure_seq: int, actor_id: str | None,
              node_id: str | None) -> None:
        started = time.monotonic()
        state_api_asked = False
        while True:
            waited = time.monotonic() - started
            ask_state_api = not state_api_asked and waited >= _STATE_API_AFTER_S
            state_api_asked = state_api_asked or ask_state_api
            try:
                answer = ask_ray(actor_id, node_id, ask_state_api)
            except Exception as exc:  # never let Ray's errors escape a daemon thread
                logger.debug("statemachine: asking Ray why actor %s died: %s", actor_id, exc)
                answer = None
            if answer is not None:
                death, source = answer
                self._answers.append((trial_id, DeathCauseLearned(
                    failure_seq=failure_seq, death=death, source=source)))
                return
            if waited + _POLL_S > self.timeout_s:
                logger.info("statemachine: Ray did not tell within %.0f s why actor %s of "
                            "trial %s died: its cause stays 'unknown'", self.timeout_s,
                            actor_id, trial_id)
                return
            time.sleep(_POLL_S)

    @property
    def pending(self) -> int:
        """Lookups still running."""
        self._threads = [t for t in self._threads if t.is_alive()]
        return len(self._threads)

    def learned(self) -> list[tuple[str, DeathCauseLearned]]:
        """The answers that came since the last call, as ``(trial id, event)``."""
        answers = []
        while self._answers:
            answers.append(self._answers.popleft())
        return answers

    def wait(self, timeout_s: float = END_WAIT_S) -> None:
        """Wait at most ``timeout_s`` for the lookups still running (the experiment ended)."""
        deadline = time.monotonic() + timeout_s
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
