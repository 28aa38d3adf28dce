"""The live registry a driver holds: every trial's state, kept equal to the fold of its log.

``record`` folds the event on a copy of the trial's state (so an invalid event changes
nothing), appends it with the transition record it produced, and only then keeps the new
state. It folds through the table compiled from the ``transitions`` machine
(:func:`statemachine.domain.compiled.fold_for_session`, the one live fold): the same code path
that rehydration and bulk replay use, proven equal to the machine by the domain's property
test, and about 30 times cheaper per event than a trigger (which matters for group commits of
results). :func:`statemachine.log.verification.verify` re-folds a log through the ``transitions``
machine itself, so every recorded decision is also checked against the definition.

A caller that folds every event itself before it is written (the Tune recorder, which must
know the decision while the store is down) hands the log its fold with :meth:`append_folded`:
an event folded from the very state object the log holds for the trial is appended as it
was folded, without a second fold; any other is folded again here.

Opening rehydrates every trial from its newest snapshot plus the events after it. Snapshots
are written every ``snapshot_every`` events of a trial and for every trial at a clean close,
each with the trial's share of the per-node tally (:mod:`statemachine.log.node_shares`).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from statemachine.domain.compiled import apply_compiled, fold_for_session
from statemachine.domain.events import Event
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.exceptions import ConcurrencyError, ConfigurationError, StoreError
from statemachine.log.dialect import DEFAULT_BUSY_TIMEOUT_MS
from statemachine.log.node_shares import count_appended
from statemachine.log.records import AppendRequest, DriverSession, new_event_id, new_event_ids
from statemachine.log.replay import fold_stored, rehydrate, share_of
from statemachine.log.snapshot import Share
from statemachine.log.store import EventStore

logger = logging.getLogger(__name__)
#: ``AppendRequest(*fields)`` in C (one is made per recorded event).
_request = functools.partial(tuple.__new__, AppendRequest)


class Prefolded(NamedTuple):
    """An event its caller folded already, as this log would (:meth:`ExperimentLog.append_folded`).

    ``before`` is the state object it was folded from (``None``: a trial new to the caller),
    ``after`` the state it left (a new object, never changed afterwards; ``None``: not folded
    on its own, the log folds it), ``seq`` the trial's seq before it and ``record`` what it did.
    """

    trial_id: str
    event: Event
    event_id: str
    seq: int = -1
    record: TransitionRecord | None = None
    before: TrialState | None = None
    after: TrialState | None = None


class ExperimentLog:
    """An experiment's trials, recorded durably as a driver session. Open with :meth:`open`."""

    def __init__(
        self,
        store: EventStore,
        session: DriverSession,
        states: dict[str, TrialState],
        *,
        snapshot_every: int,
        owns_store: bool,
        shares: dict[str, Share] | None = None,
    ) -> None:
        """Use :meth:`open` instead."""
        self.store = store
        self.session = session
        self._states = states
        #: Each trial's share of the per-node tally at its state (missing: no attempt yet;
        #: ``None``: not known, as for every trial of ``states`` given without ``shares``).
        self._shares: dict[str, Share] = (
            shares if shares is not None else dict.fromkeys(states))
        self._snapshot_every = snapshot_every
        self._owns_store = owns_store
        self._closed = False
        self._lock = threading.RLock()  # one record at a time: fold, append, keep
        #: ``(old name, old storage path)`` when :meth:`open` continued a renamed experiment.
        self.renamed_from: tuple[str, str | None] | None = None

    @classmethod
    def open(
        cls,
        url_or_store: str | Path | EventStore,
        experiment: str,
        policy: RetryPolicy,
        *,
        storage_path: str | None = None,
        session_kind: str | None = None,
        snapshot_every: int = 100,
        sqlite_synchronous: str = "FULL",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        continue_trials: Collection[str] = (),
    ) -> ExperimentLog:
        """Start a driver session on ``experiment`` and rehydrate its trials.

        The new session fences out any older driver of the experiment before the states are
        read, so nothing the old driver could still write is missed. ``session_kind``
        records how the driver began (``"fresh"``: ``Tuner.fit()``, ``"restore"``:
        ``Tuner.restore``; see :meth:`EventStore.start_session`).

        ``continue_trials``: ids of trials the driver restored (``Tuner.restore``). When the
        store has no ``experiment`` but another experiment holds every one of them, the
        experiment was moved or renamed: it continues under the new name with its history
        (:attr:`renamed_from` says from which).
        """
        if snapshot_every < 1:
            raise ConfigurationError(f"snapshot_every must be >= 1, got {snapshot_every}")
        owns = not isinstance(url_or_store, EventStore)
        store = (
            EventStore.open(
                url_or_store,
                sqlite_synchronous=sqlite_synchronous,
                busy_timeout_ms=busy_timeout_ms,
            )
            if not isinstance(url_or_store, EventStore)
            else url_or_store
        )
        renamed_from: tuple[str, str | None] | None = None
        try:
            if continue_trials and not store.has_experiment(experiment):
                old = store.find_experiment_with_trials(continue_trials, other_than=experiment)
                if old is not None:
                    renamed_from = (old, store.experiment_storage_path(old))
                    store.rename_experiment(old, experiment)
                    logger.warning("statemachine: experiment %r continues as %r (its trials "
                                   "are in the log under the old name)", old, experiment)
            session = store.start_session(experiment, policy=policy, storage_path=storage_path,
                                          kind=session_kind)
            shares: dict[str, Share] = {}
            states = rehydrate(store, experiment, shares)
        except BaseException:
            if owns:
                store.close()
            raise
        log = cls(store, session, states, snapshot_every=snapshot_every, owns_store=owns,
                  shares=shares)
        log.renamed_from = renamed_from
        return log

    # ------------------------------------------------------------ reading

    @property
    def experiment(self) -> str:
        """The experiment's name."""
        return self.session.experiment

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy of this driver session."""
        return self.session.policy

    def state(self, trial_id: str) -> TrialState | None:
        """A copy of the trial's current state (``None`` for a trial never recorded)."""
        state = self._states.get(trial_id)
        return state.copy() if state is not None else None

    def states(self) -> dict[str, TrialState]:
        """Copies of every trial's current state."""
        with self._lock:
            return {trial_id: state.copy() for trial_id, state in self._states.items()}

    def events(self, trial_id: str) -> list[Event]:
        """The trial's recorded events, oldest first (read from the store)."""
        with self._lock:
            return [stored.event for stored in self.store.read_trial(self.experiment, trial_id)]

    def preview(self, trial_id: str, event: Event) -> TransitionRecord:
        """What recording ``event`` would do (the decision), without writing or changing it."""
        return self._fold(trial_id, event, None, {}, [], {})

    # ------------------------------------------------------------ recording

    def _fold(
        self,
        trial_id: str,
        event: Event,
        event_id: str | None,
        pending: dict[str, TrialState],
        requests: list[AppendRequest],
        last: dict[str, TransitionRecord],
    ) -> TransitionRecord:
        """Fold ``event`` on the trial's working copy in ``pending`` (made from its state on
        first use); add the requests that append it to ``requests``; return what it did.

        ``last``: each trial's latest record in this batch (an equal record is reused).
        """
        work = pending.get(trial_id)
        if work is None:
            current = self._states.get(trial_id)
            work = pending[trial_id] = (
                current.copy() if current is not None else TrialState(trial_id)
            )
        event_id = event_id or new_event_id()
        session = self.session.policy
        if work.policy is not session and work.policy == session:
            # an equal value (a new trial's default policy under a default session): the
            # session's own object from now on, so the identity check below holds
            work.policy = session
        if work.policy is session:  # fold_for_session's common case, inline: the hot path
            record = last[trial_id] = apply_compiled(work, event, None, last.get(trial_id))
            requests.append(_request((trial_id, event, work.seq - 1, record, event_id)))
            return record
        for each, seq, record, _ in fold_for_session(work, event, session, last.get(trial_id)):
            # The PolicySet written for an event gets that event's id + "/p": a retry of the
            # event retries both, idempotently.
            e_id = event_id if each is event else event_id + "/p"
            requests.append(_request((trial_id, each, seq, record, e_id)))
        last[trial_id] = record
        return record

    def record(
        self, trial_id: str, event: Event, *, event_id: str | None = None
    ) -> TransitionRecord:
        """Append ``event`` to the trial durably, keep the new state, return what it did.

        An event not valid in the trial's state raises ``InvalidTransitionError``; a failed
        append raises a ``StoreError`` (``FencedError`` when a newer driver took over). In both
        cases nothing is written and the state is unchanged. Retrying with the same
        ``event_id`` after an error whose outcome is unknown is safe (idempotent).
        """
        with self._lock:
            return self._record_many(((trial_id, event),), (event_id,))[0]

    def record_many(
        self,
        items: Iterable[tuple[str, Event]],
        *,
        event_ids: Iterable[str | None] | None = None,
    ) -> list[TransitionRecord]:
        """Record many events in one transaction (group commit): all of them, or none.

        Events of one trial fold in the order given. The same guarantees as :meth:`record`.
        """
        with self._lock:
            return self._record_many(items, event_ids)

    def _record_many(
        self, items: Iterable[tuple[str, Event]], event_ids: Iterable[str | None] | None
    ) -> list[TransitionRecord]:
        self._check_open()
        items = list(items)
        ids: list[str | None] = (
            list(event_ids) if event_ids is not None else list(new_event_ids(len(items)))
        )
        if len(ids) != len(items):
            raise ConfigurationError(
                f"{len(items)} events but {len(ids)} event ids: give one id (or None) per event"
            )
        pending: dict[str, TrialState] = {}
        requests: list[AppendRequest] = []
        last: dict[str, TransitionRecord] = {}
        results: list[TransitionRecord] = []
        fold = self._fold
        for (trial_id, event), event_id in zip(items, ids, strict=True):
            results.append(fold(trial_id, event, event_id, pending, requests, last))
        return self._commit(pending, requests, results)

    def append_folded(self, items: Sequence[Prefolded]) -> list[TransitionRecord]:
        """Append events the caller folded already, in one transaction (all or none).

        An event folded from the state object this log holds for its trial (or, for a new
        trial, from none), under this session's policy, is appended as it was folded and its
        ``after`` state kept as it is; any other is folded again here, as :meth:`record_many`
        does (a caller's state that was not this log's, such as a shadow fold begun while the
        store was down). The same guarantees as :meth:`record`.
        """
        with self._lock:
            self._check_open()
            pending: dict[str, TrialState] = {}
            adopted: set[str] = set()  # pending states that are the caller's: never changed
            requests: list[AppendRequest] = []
            last: dict[str, TransitionRecord] = {}
            results: list[TransitionRecord] = []
            for item in items:
                trial_id = item.trial_id
                current = pending[trial_id] if trial_id in pending else self._states.get(trial_id)
                after, record = item.after, item.record
                # (a state under another policy than this session's: another session's fold)
                if after is not None and record is not None and current is item.before and (
                        after.policy is self.policy or after.policy == self.policy):
                    requests.append(_request((trial_id, item.event, item.seq, record,
                                              item.event_id)))
                    pending[trial_id] = after
                    adopted.add(trial_id)
                    results.append(record)
                    continue
                if trial_id in adopted:  # fold on a copy of the caller's state, never on it
                    pending[trial_id] = pending[trial_id].copy()
                    adopted.discard(trial_id)
                results.append(self._fold(trial_id, item.event, item.event_id, pending,
                                          requests, last))
                if after is not None and pending[trial_id] == after:
                    pending[trial_id] = after  # the same fold: follow the caller's again
                    adopted.add(trial_id)
            return self._commit(pending, requests, results)

    def _commit(
        self,
        pending: dict[str, TrialState],
        requests: list[AppendRequest],
        results: list[TransitionRecord],
    ) -> list[TransitionRecord]:
        """Append ``requests`` in one transaction, then keep the ``pending`` states."""
        try:
            # One request is one fenced statement; more are one transaction. No stored
            # records are built: the states and the transition records are the answer.
            self.store.append_batch(self.session, requests, returning=False)
        except ConcurrencyError:
            # Our view of a trial is behind the log (an earlier append committed although it
            # reported an error): catch up from the log so the next record works, then say so.
            for trial_id in pending:
                self._reload(trial_id)
            raise
        count_appended(self._shares, requests)
        due = []
        for trial_id, work in pending.items():
            before = self._states.get(trial_id)
            if (
                work.seq // self._snapshot_every
                > (before.seq if before else 0) // self._snapshot_every
            ):
                due.append(work)
            self._states[trial_id] = work
        if due:
            try:
                self.store.save_snapshots(self.session, due, self._shares)
            except StoreError as exc:
                # The events are stored and kept: a snapshot is only a cache of them, so a
                # failed one must not turn a durable record into an error (and a retry).
                logger.warning("statemachine: snapshot not saved, the log is intact: %s", exc)
        return results

    def _reload(self, trial_id: str) -> None:
        replay = fold_stored(trial_id, self.store.read_trial(self.experiment, trial_id))
        self._states[trial_id] = replay.state
        self._shares[trial_id] = share_of(replay.steps)

    # ------------------------------------------------------------ closing

    def close(self, clean: bool = True) -> None:
        """End the session; a clean close first snapshots every trial. Idempotent."""
        with self._lock:
            self._close(clean)

    def _close(self, clean: bool) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            try:
                if clean:
                    self.store.save_snapshots(self.session, self._states.values(),
                                              self._shares)
            except BaseException:
                clean = False  # e.g. fenced: the session did not end cleanly
                raise
            finally:
                self.store.end_session(self.session, clean=clean)
        finally:
            if self._owns_store:
                self.store.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the log of experiment {self.experiment!r} is closed")

    def __enter__(self) -> ExperimentLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(clean=exc_type is None)
