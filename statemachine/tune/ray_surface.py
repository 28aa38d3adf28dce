"""Every piece of Ray this package reads, writes, wraps or imports, in one place.

The rest of :mod:`statemachine.tune` never touches an attribute of a Ray object: it calls the
functions here, so the Ray surface the project depends on can be audited and version-gated in
this one file (``tests/tune/test_tune_units.py`` fails if another module reaches into Ray's
internals). Each access below was checked in the source of Ray 2.40.0 and Ray 2.60.0, the
oldest and the newest supported versions, and is exercised on both by ``.ci/run``
(``compat.TESTED_RAY``). "Same" means same name, type and meaning in both.

Reads and writes on ``ray.tune.experiment.Trial`` (DeveloperAPI) and what it holds:

- ``trial.trial_id``, ``.status``, ``.config``, ``.max_failures`` (read): :func:`trial_id`,
  :func:`status`, :func:`config`, :func:`max_failures`. Same.
- ``trial.storage`` (``ray.train._internal.storage.StorageContext``, internal):
  ``.experiment_dir_name``, ``.experiment_fs_path``, ``.trial_fs_path``,
  ``.storage_filesystem`` (read): :func:`experiment_name`, :func:`experiment_path`,
  :func:`trial_path`, :func:`storage_filesystem`. Same.
- ``trial.error_file`` (property, read): :func:`error_file`. Same.
- ``trial.is_restoring`` (property: ``temporary_state.restoring_from is not None``, read):
  :func:`is_restoring`. Same.
- ``trial.run_metadata.num_failures`` (read and written): :func:`num_failures`,
  :func:`set_num_failures`. Same.
- ``trial.run_metadata.last_result`` (read: whether the trial ever reported): :func:`never_ran`.
  Same.
- ``trial.temporary_state.num_restore_failures`` (written; never saved by Ray):
  :func:`set_restore_failures`. Same.
- ``trial.latest_checkpoint_result`` (property: the manager's latest result, else
  ``trial._restore_checkpoint_result``) and its ``.checkpoint.path`` (read):
  :func:`current_checkpoint`. Same.
- ``trial.run_metadata.checkpoint_manager`` (``ray.train._internal.checkpoint_manager.
  _CheckpointManager``, internal): ``.best_checkpoint_results`` (read),
  ``._latest_checkpoint_result`` and ``._checkpoint_results`` (private, written);
  ``trial._restore_checkpoint_result`` (private, written); ``run_metadata.invalidate_cache()``
  and ``trial.invalidate_json_state()`` (called): :func:`checkpoint_paths`,
  :func:`forget_checkpoints`, :func:`restore_from`. Same.
- ``ray.train.Checkpoint(path, filesystem)`` and
  ``ray.train._internal.session._TrainingResult(checkpoint, metrics)`` (internal; built to
  point Ray at an older checkpoint): :func:`restore_from`. Same.
- ``Checkpoint.path`` of what ``Callback.on_checkpoint`` receives: :func:`checkpoint_path`.
  Same.

Methods of ``Trial`` wrapped in place (the error seam, :data:`SEAM_METHODS`):
``handle_error(exc=None)``, ``on_restore()``, ``set_status(status)``, ``should_recover()``:
:func:`wrap_trial_methods`. Same signatures and call order in both; that they exist is
checked when :mod:`statemachine.tune` is imported (:func:`missing_trial_methods`).

Public classes whose home differs: ``RunConfig``, ``FailureConfig``, ``CheckpointConfig``
for ``tune.Tuner`` are only in ``ray.train`` in 2.40; 2.60 has them in ``ray.tune`` and emits a
``RayDeprecationWarning`` when ``ray.train``'s are passed to a ``Tuner``. This module exports
the ones of the installed Ray.

Nodes and placement (``RetryPolicy.avoid_failed_nodes``, and the node of every start and
failure); read in Ray 2.60, and guarded so an older Ray only gets ``None``/"unsupported":

- the node of an actor: the GCS actor table (``ray._private.state.state.actor_table``,
  internal: ``Address.NodeID``/``IPAddress``) and ``ray.nodes()`` (``NodeID``,
  ``NodeManagerAddress``, ``NodeManagerHostname``, ``Alive``, ``Resources``):
  :func:`actor_node`, :func:`node_ref`, :func:`can_host_elsewhere`;
- the actor of a trial and of a failure: ``trial.temporary_state.ray_actor`` (its
  ``_actor_id``), ``RayActorError.actor_id``, ``RayTaskError._actor_id`` and ``.ip``:
  :func:`started_actor`, :func:`failure_node`;
- placement: ``trial.placement_group_factory`` (a ``PlacementGroupFactory``: its
  ``bundles``, ``strategy``, ``head_bundle_is_empty`` and the private ``_args``/``_kwargs``
  passed to ``ray.util.placement_group``, which takes ``bundle_label_selector`` since Ray
  2.49; every node carries the ``ray.io/node-id`` label), written as
  ``Trial.update_resources`` does with ``invalidate_json_state()``: :func:`factory`,
  :func:`with_exclusion`, :func:`without_exclusion`, :func:`excluded_by`,
  :func:`set_factory`, :func:`selector_support`;
- dropping the exclusion of a trial whose actor request is pending: the ``TuneController``'s
  private bookkeeping (``_trial_to_actor``, ``_actor_to_trial``, ``_staged_trials``,
  ``_actor_cache.decrease_max``, ``_resources_to_pending_trials``,
  ``_actor_manager.is_actor_started``/``remove_actor``, which cancels the pending resource
  request), reached through a wrapper of ``TuneController._schedule_trial_actor`` installed
  only when the policy asks for it: :func:`track_controller`, :func:`set_factory`.

Outside this module Ray is used only through public names: ``ray.tune.Callback`` (base of
:class:`~statemachine.tune.EventLogCallback`), ``ray.__version__`` (:mod:`.compat`), and
``ray.exceptions.RayTaskError``/``RayActorError`` (``.cause``, ``.preempted``,
``.traceback_str``) in :mod:`statemachine.tune.ray_errors`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ray.tune.experiment import Trial

from statemachine.domain.nodes import NodeRef

_logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.storage import StorageContext
    from ray.tune import CheckpointConfig, FailureConfig, RunConfig
else:
    try:  # Ray 2.60 (and every version with them in ray.tune): these are the Tuner's own
        from ray.tune import CheckpointConfig, FailureConfig, RunConfig
    except ImportError:  # Ray 2.40 keeps them under ray.train only
        from ray.train import CheckpointConfig, FailureConfig, RunConfig

__all__ = [
    "NODE_ID_LABEL",
    "SEAM_METHODS",
    "SELECTOR_MIN_RAY",
    "CheckpointConfig",
    "FailureConfig",
    "RunConfig",
    "Trial",
    "TrialMethodHooks",
    "actor_node",
    "can_host_elsewhere",
    "checkpoint_path",
    "checkpoint_paths",
    "config",
    "current_checkpoint",
    "error_file",
    "excluded_by",
    "experiment_name",
    "experiment_path",
    "factory",
    "failure_node",
    "forget_checkpoints",
    "is_restoring",
    "max_failures",
    "missing_trial_methods",
    "never_ran",
    "node_ref",
    "num_failures",
    "restore_from",
    "selector_support",
    "set_factory",
    "set_num_failures",
    "set_restore_failures",
    "started_actor",
    "status",
    "storage_filesystem",
    "track_controller",
    "trial_id",
    "trial_methods_wrapped",
    "trial_path",
    "with_exclusion",
    "without_exclusion",
    "wrap_trial_methods",
]

# ---------------------------------------------------------------------- identity, storage


def _storage(trial: Trial) -> StorageContext:
    storage = trial.storage
    if storage is None:  # only a trial built by hand lacks it; Tune always sets it
        raise ValueError(f"trial {trial.trial_id} has no storage (StorageContext)")
    return storage


def trial_id(trial: Trial) -> str:
    """The trial's id (``Trial.trial_id``)."""
    return str(trial.trial_id)


def status(trial: Trial) -> str:
    """Ray's status string of the trial (``PENDING``, ``RUNNING``, ``PAUSED``, ...)."""
    return str(trial.status)


def config(trial: Trial) -> Any:
    """The trial's hyperparameter config as Ray holds it."""
    return trial.config


def max_failures(trial: Trial) -> int:
    """The run's ``FailureConfig.max_failures`` as the trial carries it."""
    return int(trial.max_failures)


def experiment_name(trial: Trial) -> str:
    """The experiment's folder name (``_storage(trial).experiment_dir_name``)."""
    return str(_storage(trial).experiment_dir_name)


def experiment_path(trial: Trial) -> str:
    """The experiment's folder on its storage filesystem."""
    return str(_storage(trial).experiment_fs_path)


def trial_path(trial: Trial) -> str:
    """The trial's own folder on its storage filesystem."""
    return str(_storage(trial).trial_fs_path)


def storage_filesystem(trial: Trial) -> Any:
    """The ``pyarrow.fs.FileSystem`` the experiment is stored on (local or remote)."""
    return _storage(trial).storage_filesystem


def error_file(trial: Trial) -> str | None:
    """The trial's ``error.txt`` on the driver, once Ray has written one."""
    path = trial.error_file
    return str(path) if path else None


def is_restoring(trial: Trial) -> bool:
    """Whether Ray is restoring the trial from a checkpoint right now."""
    try:
        return bool(trial.is_restoring)
    except Exception:  # a half-built trial has no temporary state
        return False


# ---------------------------------------------------------------------- failure counters


def num_failures(trial: Trial) -> int:
    """Ray's count of the trial's failures (what ``should_recover`` compares)."""
    return int(trial.run_metadata.num_failures)


def set_num_failures(trial: Trial, count: int) -> None:
    """Put ``count`` into Ray's failure count."""
    trial.run_metadata.num_failures = count


def never_ran(trial: Trial) -> bool:
    """Whether Ray's trial is PENDING and never ran: no result (``run_metadata.last_result``),
    no failure and no checkpoint (a new trial, whatever its id)."""
    try:
        ran = bool(trial.run_metadata.last_result)
    except Exception:  # a half-built trial has no run metadata: it never ran
        ran = False
    return (str(trial.status) == "PENDING" and not ran and num_failures(trial) == 0
            and current_checkpoint(trial) is None)


def set_restore_failures(trial: Trial, count: int) -> None:
    """Put ``count`` into Ray's restore-failure counter (``TUNE_RESTORE_RETRY_NUM``'s)."""
    trial.temporary_state.num_restore_failures = count


# ---------------------------------------------------------------------- checkpoints


def checkpoint_path(checkpoint: Any) -> str:
    """The path of a ``ray.train.Checkpoint`` (what ``on_checkpoint`` receives)."""
    return str(checkpoint.path)


def current_checkpoint(trial: Trial) -> str | None:
    """The path Ray would restore ``trial`` from now, or ``None``."""
    latest = trial.latest_checkpoint_result
    if latest is None or latest.checkpoint is None:
        return None
    return str(latest.checkpoint.path)


def _checkpoint_manager(trial: Trial) -> _CheckpointManager:
    manager = trial.run_metadata.checkpoint_manager
    if manager is None:  # set when the trial is built; cleared by no Ray version we support
        raise ValueError(f"trial {trial.trial_id} has no checkpoint manager")
    return manager


def checkpoint_paths(trial: Trial) -> list[str]:
    """Paths of every checkpoint Ray tracks for ``trial``, oldest first, latest last."""
    manager = _checkpoint_manager(trial)
    paths: list[str] = []
    for result in list(manager.best_checkpoint_results):
        if result.checkpoint is not None and result.checkpoint.path not in paths:
            paths.append(result.checkpoint.path)
    latest = trial.latest_checkpoint_result
    if latest is not None and latest.checkpoint is not None:
        if latest.checkpoint.path in paths:
            paths.remove(latest.checkpoint.path)
        paths.append(latest.checkpoint.path)
    return paths


def forget_checkpoints(trial: Trial) -> list[str]:
    """Make Ray start ``trial`` from scratch; returns the checkpoint paths it forgot.

    Afterwards ``trial.latest_checkpoint_result`` is ``None``.
    """
    paths = checkpoint_paths(trial)
    manager = _checkpoint_manager(trial)
    manager._latest_checkpoint_result = None
    manager._checkpoint_results = []
    _checkpoints_changed(trial)
    return paths


def restore_from(trial: Trial, path: str | None, dropped: list[str]) -> None:
    """Make Ray restore ``trial`` from the checkpoint at ``path`` (``None``: from scratch).

    ``dropped`` are checkpoints Ray forgets as well (the one that failed to restore and any
    newer); a ``path`` Ray no longer tracks is registered again.
    """
    if path is None:
        forget_checkpoints(trial)
        return
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult

    manager = _checkpoint_manager(trial)
    gone = set(dropped)
    kept = [
        r for r in manager._checkpoint_results
        if r.checkpoint is not None and r.checkpoint.path not in gone
    ]
    target = next((r for r in kept if r.checkpoint is not None and r.checkpoint.path == path),
                  None)
    if target is None:
        target = _TrainingResult(
            checkpoint=Checkpoint(path=path, filesystem=storage_filesystem(trial)),
            metrics={},
        )
        kept.append(target)
    manager._checkpoint_results = kept
    manager._latest_checkpoint_result = target
    _checkpoints_changed(trial)


def _checkpoints_changed(trial: Trial) -> None:
    # The checkpoint Tune was given at start (tune.run(restore=...)) would otherwise win.
    trial._restore_checkpoint_result = None
    run_metadata: Any = trial.run_metadata  # both methods are untyped in Ray
    run_metadata.invalidate_cache()
    untyped: Any = trial
    untyped.invalidate_json_state()


# ---------------------------------------------------------------------- the error seam

#: The ``Trial`` methods the seam wraps; a Ray without them cannot be supported.
SEAM_METHODS = ("handle_error", "on_restore", "set_status", "should_recover")

_WRAPPED_MARK = "__statemachine_seam__"


class TrialMethodHooks(Protocol):
    """What the wrapped ``Trial`` methods report, right after Ray's original ran."""

    def failed(self, trial: Trial, exc: BaseException | None, restoring: bool) -> None:
        """``handle_error`` ran; ``restoring``: the trial was restoring when it failed."""

    def restored(self, trial: Trial) -> None:
        """``on_restore`` ran: the restore succeeded."""

    def status_changed(self, trial: Trial, old: str | None, new: str) -> None:
        """``set_status`` changed the status from ``old`` to ``new``."""

    def recover_decision(self, trial: Trial) -> bool | None:
        """The answer ``should_recover`` returns instead of Ray's, or ``None`` for Ray's."""


def _wrap_handle_error(original: Callable[..., Any],
                       hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def handle_error(self: Trial, exc: BaseException | None = None, *args: Any,
                     **kw: Any) -> Any:
        restoring = is_restoring(self)  # Ray's handle_error clears it
        result = original(self, exc, *args, **kw)
        hooks.failed(self, exc, restoring)
        return result

    return handle_error


def _wrap_on_restore(original: Callable[..., Any],
                     hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def on_restore(self: Trial, *args: Any, **kw: Any) -> Any:
        result = original(self, *args, **kw)
        hooks.restored(self)
        return result

    return on_restore


def _wrap_set_status(original: Callable[..., Any],
                     hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def set_status(self: Trial, new: str, *args: Any, **kw: Any) -> Any:
        old = getattr(self, "status", None)
        result = original(self, new, *args, **kw)
        if old != new:
            hooks.status_changed(self, old, new)
        return result

    return set_status


def _wrap_should_recover(original: Callable[..., Any],
                         hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def should_recover(self: Trial, *args: Any, **kw: Any) -> Any:
        ray_says = original(self, *args, **kw)
        ours = hooks.recover_decision(self)
        return ray_says if ours is None else ours

    return should_recover


_WRAPPERS: dict[str, Callable[[Callable[..., Any], TrialMethodHooks], Callable[..., Any]]] = {
    "handle_error": _wrap_handle_error,
    "on_restore": _wrap_on_restore,
    "set_status": _wrap_set_status,
    "should_recover": _wrap_should_recover,
}


def wrap_trial_methods(hooks: TrialMethodHooks, trial_cls: type | None = None) -> None:
    """Wrap the :data:`SEAM_METHODS` of ``Trial`` to report to ``hooks`` (once; idempotent).

    Each wrapper runs Ray's original first and returns its result (``should_recover``:
    unless ``hooks`` answers); ``hooks`` must not raise.
    """
    cls = Trial if trial_cls is None else trial_cls
    for name, wrap in _WRAPPERS.items():
        current = cls.__dict__.get(name)
        if current is None or getattr(current, _WRAPPED_MARK, False):
            continue
        wrapped = wrap(current, hooks)
        setattr(wrapped, _WRAPPED_MARK, True)
        setattr(cls, name, wrapped)


def trial_methods_wrapped(trial_cls: type | None = None) -> bool:
    """Whether every one of the :data:`SEAM_METHODS` of ``Trial`` is wrapped."""
    cls = Trial if trial_cls is None else trial_cls
    return all(getattr(cls.__dict__.get(name), _WRAPPED_MARK, False) for name in SEAM_METHODS)


def missing_trial_methods() -> list[str]:
    """The :data:`SEAM_METHODS` the installed Ray's ``Trial`` lacks (empty when supported)."""
    return [name for name in SEAM_METHODS if not callable(getattr(Trial, name, None))]


# ---------------------------------------------------------------- nodes and placement
# (RetryPolicy.avoid_failed_nodes, and the node of every start and failure)

#: The node label Ray sets on every node (its node id), and the first Ray whose placement
#: groups take per-bundle label selectors that honour it.
NODE_ID_LABEL = "ray.io/node-id"
SELECTOR_MIN_RAY = (2, 49)

_NODES_TTL_S = 1.0
_lock = threading.Lock()
_nodes_cache: tuple[float, dict[str, dict[str, Any]]] = (0.0, {})
_PLACEMENT_MARK = "__statemachine_placement__"
#: trial id -> the TuneController that last requested an actor for it.
_controllers: dict[str, weakref.ReferenceType[Any]] = {}


# ---------------------------------------------------------------- what the installed Ray can do


def selector_support(ray_version: str | None = None) -> str | None:
    """``None`` when this Ray (or a Ray of ``ray_version``) can place a trial away from given
    nodes; else why it cannot, naming the Ray version that is needed."""
    try:
        import inspect

        import ray
        from ray.util.placement_group import placement_group

        from statemachine.tune.compat import parse_version

        installed = ray_version or ray.__version__
        version = parse_version(installed)
        needed = ".".join(map(str, SELECTOR_MIN_RAY))
        if version < SELECTOR_MIN_RAY:
            return (f"ray {installed} is installed, avoid_failed_nodes needs ray >= {needed} "
                    f"(pip install 'ray[tune]>={needed}')")
        if "bundle_label_selector" not in inspect.signature(placement_group).parameters:
            return (f"ray {ray.__version__}'s placement_group() takes no bundle_label_selector "
                    f"(needs ray >= {needed})")
    except Exception as exc:  # an odd Ray: say so, never crash
        return f"cannot tell whether this Ray supports label selectors: {exc}"
    return None


# ---------------------------------------------------------------- nodes and actors


def _nodes(refresh: bool = False) -> dict[str, dict[str, Any]]:
    """``ray.nodes()`` by node id, cached for a second (a GCS call)."""
    global _nodes_cache
    now = time.monotonic()
    with _lock:
        taken, table = _nodes_cache
        if refresh or now - taken > _NODES_TTL_S or not table:
            import ray

            table = {n["NodeID"]: n for n in ray.nodes()}  # type: ignore[no-untyped-call]
            _nodes_cache = (now, table)
        return table


def node_ref(node_id: str | None, ip: str | None = None) -> NodeRef | None:
    """What the node table says about ``node_id`` (``ip`` when the table does not tell)."""
    if not node_id:
        return NodeRef(node_ip=ip) if ip else None
    try:
        info = _nodes().get(node_id) or _nodes(refresh=True).get(node_id)
    except Exception:
        info = None
    if info is None:
        return NodeRef(node_id=node_id, node_ip=ip or None)
    return NodeRef(node_id=node_id,
                   node_ip=info.get("NodeManagerAddress") or ip or None,
                   hostname=info.get("NodeManagerHostname") or None)


def actor_node(actor_id: str | None) -> NodeRef | None:
    """The node an actor was placed on, from the GCS actor table (``None``: not known)."""
    if not actor_id:
        return None
    try:
        from ray._private.state import state

        info = state.actor_table(actor_id)
    except Exception:
        return None
    address = (info.get("Address") or {}) if isinstance(info, dict) else {}
    node_id = address.get("NodeID") or None
    if node_id and set(node_id) == {"0"}:  # a nil id: not placed yet
        node_id = None
    return node_ref(node_id, address.get("IPAddress") or None)


def trial_actor_id(trial: Any) -> str | None:
    """The id of the trial's current actor, if it has one."""
    try:
        actor = trial.temporary_state.ray_actor
        return str(actor._actor_id.hex()) if actor is not None else None
    except Exception:
        return None


def failure_actor_id(exc: BaseException | None) -> str | None:
    """The actor a Ray failure names (``RayActorError.actor_id``, a task error's actor)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for name in ("actor_id", "_actor_id"):
            value = getattr(exc, name, None)
            if isinstance(value, str) and value:
                return value
            to_hex = getattr(value, "hex", None)
            if value is not None and callable(to_hex):
                return str(to_hex())
        exc = exc.__cause__ or getattr(exc, "cause", None)
        if not isinstance(exc, BaseException):
            break
    return None


def failure_ip(exc: BaseException | None) -> str | None:
    """The IP a ``RayTaskError`` was raised on (set by the worker that raised it)."""
    try:
        from ray.exceptions import RayTaskError
    except ImportError:  # pragma: no cover
        return None
    return exc.ip if isinstance(exc, RayTaskError) and isinstance(exc.ip, str) else None


def failure_node(trial: Any, exc: BaseException | None,
                 started: tuple[str | None, NodeRef | None] | None) -> NodeRef | None:
    """Where a trial's failure happened: the node of the actor it names, else of the trial's
    actor, else (the same actor) where it started; else the IP a task error carries."""
    actor_id = failure_actor_id(exc) or trial_actor_id(trial)
    node = actor_node(actor_id)
    if node is None or node.node_id is None:
        if started is not None and started[0] is not None and started[0] == actor_id:
            node = started[1] or node
    if node is None:
        ip = failure_ip(exc)
        node = NodeRef(node_ip=ip) if ip else None
    return node


def can_host_elsewhere(trial: Any, excluded: Iterable[str]) -> bool:
    """Whether a live node outside ``excluded`` has the total resources of every bundle."""
    avoid = set(excluded)
    try:
        bundles = trial.placement_group_factory.bundles
        nodes = [n for n in _nodes().values() if n.get("Alive") and n["NodeID"] not in avoid]
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


def _rebuild(pgf: Any, selectors: list[dict[str, str]] | None) -> Any:
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


def _selectors(pgf: Any) -> list[dict[str, str]]:
    given = pgf._kwargs.get("bundle_label_selector") or []
    count = len(pgf.bundles)
    return [dict(given[i]) if i < len(given) and given[i] else {} for i in range(count)]


def without_exclusion(pgf: Any) -> Any:
    """``pgf`` without the node exclusion this module adds (the trial's own resources)."""
    selectors = _selectors(pgf)
    if not any(_is_ours(s.get(NODE_ID_LABEL)) for s in selectors):
        return pgf
    for s in selectors:
        if _is_ours(s.get(NODE_ID_LABEL)):
            del s[NODE_ID_LABEL]
    return _rebuild(pgf, selectors)


def with_exclusion(pgf: Any, node_ids: Sequence[str]) -> Any | None:
    """``pgf`` whose every bundle avoids ``node_ids``; ``None`` if the trial's own resources
    already select by node id (the user's choice stands)."""
    selectors = _selectors(without_exclusion(pgf))
    if any(NODE_ID_LABEL in s for s in selectors):
        return None
    for s in selectors:
        s[NODE_ID_LABEL] = _selector_value(node_ids)
    return _rebuild(pgf, selectors)


def excluded_by(pgf: Any) -> tuple[str, ...]:
    """The node ids a factory's exclusion names (empty: none)."""
    for s in _selectors(pgf):
        value = s.get(NODE_ID_LABEL)
        if _is_ours(value):
            return tuple(v.strip() for v in str(value)[4:-1].split(",") if v.strip())
    return ()


def factory(trial: Any) -> Any:
    """The trial's placement group factory."""
    return trial.placement_group_factory


def set_factory(trial: Any, pgf: Any) -> bool:
    """Give the trial new resources, as ``Trial.update_resources`` does (which refuses a
    RUNNING trial: a failed one is still RUNNING inside ``handle_error``), keeping Tune's
    bookkeeping of a pending trial straight. False when the trial's actor already started
    (its placement is done) or Tune's internals are not as expected."""
    if trial.placement_group_factory == pgf:
        return True
    if trial.status == "PENDING":
        ref = _controllers.get(trial.trial_id)
        controller = ref() if ref is not None else None
        if controller is not None and not _unstage(controller, trial):
            return False
        if controller is not None:
            controller._resources_to_pending_trials[trial.placement_group_factory].discard(trial)
        trial.placement_group_factory = pgf
        trial.invalidate_json_state()
        if controller is not None:
            controller._resources_to_pending_trials[pgf].add(trial)
        return True
    trial.placement_group_factory = pgf
    trial.invalidate_json_state()
    return True


def _unstage(controller: Any, trial: Any) -> bool:
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
    def _schedule_trial_actor(self: Any, trial: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            _controllers[trial.trial_id] = weakref.ref(self)
        except Exception:  # never in Tune's way
            pass
        return original(self, trial, *args, **kwargs)

    setattr(_schedule_trial_actor, _PLACEMENT_MARK, True)
    controller_cls._schedule_trial_actor = _schedule_trial_actor  # type: ignore[attr-defined]


def started_actor(trial: Any) -> tuple[str | None, NodeRef | None]:
    """The trial's actor id and the node it was placed on (on ``on_trial_start``)."""
    actor_id = trial_actor_id(trial)
    return actor_id, actor_node(actor_id)

