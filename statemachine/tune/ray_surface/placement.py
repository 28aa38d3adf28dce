"""Where a trial's next actor may run: its placement group factory, and Tune's pending request.

``RetryPolicy.avoid_failed_nodes`` places a restore retry away from the nodes where its
restore failed by a per-bundle ``bundle_label_selector`` on ``ray.io/node-id`` (Ray labels
every node with its id; ``ray.util.placement_group`` takes the selector since Ray 2.49, which
:func:`statemachine.tune.compat.selector_support` checks). A trial's resources are
``trial.placement_group_factory`` (its ``bundles``, ``strategy``, ``head_bundle_is_empty`` and
the private ``_args``/``_kwargs`` given to ``ray.util.placement_group``), replaced as
``Trial.update_resources`` does. A trial that is PENDING may already have an actor request
staged: the ``TuneController``'s private bookkeeping (``_trial_to_actor``, ``_actor_to_trial``,
``_staged_trials``, ``_actor_cache.decrease_max``, ``_resources_to_pending_trials``,
``_actor_manager.is_actor_started``/``remove_actor``) is kept straight, reached through a
wrapper of ``TuneController._schedule_trial_actor`` (:func:`track_controller`). Each access is
listed, with the Ray versions it was checked on, in :mod:`..ray_surface`.
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from statemachine.tune.ray_surface.nodes import live_nodes

if TYPE_CHECKING:
    from ray.tune.execution.placement_groups import PlacementGroupFactory
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

__all__ = [
    "NODE_ID_LABEL",
    "can_host_elsewhere",
    "excluded_by",
    "factory",
    "placement_group_takes_selectors",
    "set_factory",
    "track_controller",
    "with_exclusion",
    "without_exclusion",
]

_logger = logging.getLogger(__name__)

#: The node label Ray sets on every node (its node id).
NODE_ID_LABEL = "ray.io/node-id"

_PLACEMENT_MARK = "__statemachine_placement__"
#: trial id -> the TuneController that last requested an actor for it.
_controllers: dict[str, weakref.ReferenceType[TuneController]] = {}


def placement_group_takes_selectors() -> bool:
    """Whether this Ray's ``ray.util.placement_group`` takes ``bundle_label_selector``."""
    from ray.util.placement_group import placement_group

    return "bundle_label_selector" in inspect.signature(placement_group).parameters


def can_host_elsewhere(trial: Trial, excluded: Iterable[str]) -> bool:
    """Whether a live node outside ``excluded`` has the total resources of every bundle."""
    try:
        untyped: Any = trial.placement_group_factory  # None before Tune set the resources
        bundles = untyped.bundles
        nodes = live_nodes(excluded)
    except Exception:
        return True  # not known: let the bounded wait decide
    for bundle in bundles:
        if not any(all(float(n.get("Resources", {}).get(k, 0.0)) >= float(v)
                       for k, v in bundle.items()) for n in nodes):
            return False
    return True


# ---------------------------------------------------------------- placement group factories


def _selector_value(node_ids: Sequence[str]) -> str:
    return f"!in({','.join(node_ids)})"


def _is_ours(value: object) -> bool:
    return isinstance(value, str) and value.startswith("!in(")


def _rebuild(pgf: PlacementGroupFactory,
             selectors: list[dict[str, str]] | None) -> PlacementGroupFactory:
    """``pgf`` with ``bundle_label_selector`` replaced (``None``: removed)."""
    from ray.tune.execution.placement_groups import PlacementGroupFactory

    bundles = pgf.bundles
    if pgf.head_bundle_is_empty:
        bundles = [{}, *bundles]
    kwargs = dict(pgf._kwargs)
    kwargs.pop("bundle_label_selector", None)
    if selectors is not None and any(selectors):
        kwargs["bundle_label_selector"] = selectors
    return PlacementGroupFactory(bundles, pgf.strategy, *pgf._args, **kwargs)


def _selectors(pgf: PlacementGroupFactory) -> list[dict[str, str]]:
    given = pgf._kwargs.get("bundle_label_selector") or []
    count = len(pgf.bundles)
    return [dict(given[i]) if i < len(given) and given[i] else {} for i in range(count)]


def without_exclusion(pgf: PlacementGroupFactory) -> PlacementGroupFactory:
    """``pgf`` without the node exclusion this module adds (the trial's own resources)."""
    selectors = _selectors(pgf)
    if not any(_is_ours(s.get(NODE_ID_LABEL)) for s in selectors):
        return pgf
    for s in selectors:
        if _is_ours(s.get(NODE_ID_LABEL)):
            del s[NODE_ID_LABEL]
    return _rebuild(pgf, selectors)


def with_exclusion(pgf: PlacementGroupFactory,
                   node_ids: Sequence[str]) -> PlacementGroupFactory | None:
    """``pgf`` whose every bundle avoids ``node_ids``; ``None`` if the trial's own resources
    already select by node id (the user's choice stands)."""
    selectors = _selectors(without_exclusion(pgf))
    if any(NODE_ID_LABEL in s for s in selectors):
        return None
    for s in selectors:
        s[NODE_ID_LABEL] = _selector_value(node_ids)
    return _rebuild(pgf, selectors)


def excluded_by(pgf: PlacementGroupFactory) -> tuple[str, ...]:
    """The node ids a factory's exclusion names (empty: none)."""
    for s in _selectors(pgf):
        value = s.get(NODE_ID_LABEL)
        if _is_ours(value):
            return tuple(v.strip() for v in str(value)[4:-1].split(",") if v.strip())
    return ()


# ---------------------------------------------------------------- the trial's resources


def factory(trial: Trial) -> PlacementGroupFactory | None:
    """The trial's placement group factory (``None`` before Tune set its resources)."""
    pgf: PlacementGroupFactory | None = trial.placement_group_factory
    return pgf


def set_factory(trial: Trial, pgf: PlacementGroupFactory) -> bool:
    """Give the trial new resources, as ``Trial.update_resources`` does (which refuses a
    RUNNING trial: a failed one is still RUNNING inside ``handle_error``), keeping Tune's
    bookkeeping of a pending trial straight. False when the trial's actor already started
    (its placement is done) or Tune's internals are not as expected."""
    # Ray types the attribute by its first value (None); invalidate_json_state is untyped.
    untyped: Any = trial
    if untyped.placement_group_factory == pgf:
        return True
    if trial.status == "PENDING":
        ref = _controllers.get(trial.trial_id)
        controller = ref() if ref is not None else None
        if controller is not None and not _unstage(controller, trial):
            return False
        if controller is not None:
            controller._resources_to_pending_trials[untyped.placement_group_factory].discard(
                trial)
        untyped.placement_group_factory = pgf
        untyped.invalidate_json_state()
        if controller is not None:
            controller._resources_to_pending_trials[pgf].add(trial)
        return True
    untyped.placement_group_factory = pgf
    untyped.invalidate_json_state()
    return True


def _unstage(controller: TuneController, trial: Trial) -> bool:
    """Cancel the actor request of a PENDING trial (so it is requested anew); False when
    its actor is already placed."""
    try:
        tracked = controller._trial_to_actor.get(trial)
        if tracked is not None:
            if controller._actor_manager.is_actor_started(tracked):
                return False
            controller._trial_to_actor.pop(trial, None)
            controller._actor_to_trial.pop(tracked, None)
            controller._actor_manager.remove_actor(tracked, kill=False)
        if trial in controller._staged_trials:
            controller._staged_trials.discard(trial)
            controller._actor_cache.decrease_max(trial.placement_group_factory)
        return True
    except Exception:
        _logger.exception("statemachine: cannot re-request the placement of trial %s", trial)
        return False


def track_controller(controller_cls: type | None = None) -> None:
    """Remember which TuneController requests each trial's actor (once per process)."""
    if controller_cls is None:
        from ray.tune.execution.tune_controller import TuneController

        controller_cls = TuneController
    original = controller_cls.__dict__.get("_schedule_trial_actor")
    if original is None or getattr(original, _PLACEMENT_MARK, False):
        return

    @functools.wraps(original)
    def _schedule_trial_actor(self: TuneController, trial: Trial, *args: Any,
                              **kwargs: Any) -> Any:
        try:
            _controllers[trial.trial_id] = weakref.ref(self)
        except Exception:  # never in Tune's way
            pass
        return original(self, trial, *args, **kwargs)

    setattr(_schedule_trial_actor, _PLACEMENT_MARK, True)
    controller_cls._schedule_trial_actor = _schedule_trial_actor  # type: ignore[attr-defined]
