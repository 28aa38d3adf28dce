"""Every piece of Ray's internals this package reads, writes or wraps, in one package.

The rest of :mod:`statemachine.tune` never touches an attribute of a Ray object: it calls the
functions of these modules, so the Ray surface the project depends on can be audited in one
place (``tests/tune/test_tune_units.py::test_only_ray_surface_touches_rays_internals`` fails
if another module reaches into Ray's internals, by attribute, by ``getattr``/``setattr`` of a
private name, or by importing a private Ray module). Which Ray versions are supported, and
what differs between them, is :mod:`statemachine.tune.compat`'s: it imports from here, never
the reverse. Each access below was checked in the source of Ray 2.40.0 and Ray 2.60.0, the
oldest and the newest supported versions, and is exercised on both by ``.ci/run``
(``compat.TESTED_RAY``). "Same" means same name, type and meaning in both.

One module per job:

- :mod:`.trials`: what a ``Trial`` says about itself, and its failure counters;
- :mod:`.checkpoint_manager`: which checkpoints Ray tracks and restores a trial from;
- :mod:`.trial_methods`: the ``Trial`` methods wrapped in place (the error seam);
- :mod:`.nodes`: the node of an actor, of a trial and of a failure;
- :mod:`.deaths`: why an actor died, as Ray tells after the fact, and the preemption drill;
- :mod:`.placement`: a trial's placement group factory and Tune's pending actor request;
- :mod:`.requeue`: the restored trials, before Ray requeues them after ``Tuner.restore``, and
  each trial before Ray queues it.

Reads and writes on ``ray.tune.experiment.Trial`` (DeveloperAPI) and what it holds
(:mod:`.trials`):

- ``trial.trial_id``, ``.status``, ``.config``, ``.max_failures`` (read): ``trial_id``,
  ``status``, ``config``, ``max_failures``. Same.
- ``trial.storage`` (``ray.train._internal.storage.StorageContext``, internal):
  ``.experiment_dir_name``, ``.experiment_fs_path``, ``.trial_fs_path``,
  ``.storage_filesystem`` (read): ``experiment_name``, ``experiment_path``, ``trial_path``,
  ``storage_filesystem``. Same.
- ``trial.error_file`` (property, read): ``error_file``. Same.
- ``trial.is_restoring`` (property: ``temporary_state.restoring_from is not None``, read):
  ``is_restoring``. Same.
- ``trial.run_metadata.num_failures`` (read and written): ``num_failures``,
  ``set_num_failures``. Same.
- ``trial.run_metadata.last_result`` (read: whether the trial ever reported, and its
  ``training_iteration``, recorded with every failure): ``never_ran``, ``last_iteration``.
  Same.
- ``trial.temporary_state.num_restore_failures`` (written; never saved by Ray):
  ``set_restore_failures``. Same.
- ``trial.latest_checkpoint_result`` (property: the manager's latest result, else
  ``trial._restore_checkpoint_result``) and its ``.checkpoint.path`` (read):
  ``current_checkpoint``. Same.

Ray's checkpoint bookkeeping (:mod:`.checkpoint_manager`):

- ``trial.run_metadata.checkpoint_manager`` (``ray.train._internal.checkpoint_manager.
  _CheckpointManager``, internal): ``.best_checkpoint_results`` (read),
  ``._latest_checkpoint_result`` and ``._checkpoint_results`` (private, written);
  ``trial._restore_checkpoint_result`` (private, written); ``run_metadata.invalidate_cache()``
  and ``trial.invalidate_json_state()`` (called): ``checkpoint_paths``,
  ``forget_checkpoints``, ``restore_from``. Same.
- ``ray.train.Checkpoint(path, filesystem)`` and
  ``ray.train._internal.session._TrainingResult(checkpoint, metrics)`` (internal; built to
  point Ray at an older checkpoint): ``restore_from``. Same.
- ``Checkpoint.path`` of what ``Callback.on_checkpoint`` receives: ``checkpoint_path``. Same.

Methods of ``Trial`` wrapped in place (the error seam, ``SEAM_METHODS``;
:mod:`.trial_methods`): ``handle_error(exc=None)``, ``on_restore()``, ``set_status(status)``,
``should_recover()``: ``wrap_trial_methods``. Same signatures and call order in both; that
they exist is checked when :mod:`statemachine.tune` is imported (``compat.check_ray`` calls
``missing_trial_methods``).

Nodes and placement (``RetryPolicy.avoid_failed_nodes``, and the node of every start and
failure); read in Ray 2.60, and guarded so an older Ray only gets ``None``/"unsupported":

- the node of an actor (:mod:`.nodes`): the GCS actor table
  (``ray._private.state.state.actor_table``, internal: ``Address.NodeID``/``IPAddress``) and
  ``ray.nodes()`` (``NodeID``, ``NodeManagerAddress``, ``NodeManagerHostname``, ``Alive``,
  ``Resources``): ``actor_node``, ``node_ref``, ``live_nodes``;
- the actor of a trial and of a failure (:mod:`.nodes`): ``trial.temporary_state.ray_actor``
  (its ``_actor_id``), ``RayActorError.actor_id``, ``RayTaskError._actor_id`` and ``.ip``:
  ``started_actor``, ``failure_node``;
- placement (:mod:`.placement`): ``trial.placement_group_factory`` (a
  ``PlacementGroupFactory``: its ``bundles``, ``strategy``, ``head_bundle_is_empty`` and the
  private ``_args``/``_kwargs`` passed to ``ray.util.placement_group``, which takes
  ``bundle_label_selector`` since Ray 2.49 (``placement_group_takes_selectors``; the version
  gate is ``compat.selector_support``); every node carries the ``ray.io/node-id`` label),
  written as ``Trial.update_resources`` does with ``invalidate_json_state()``: ``factory``,
  ``with_exclusion``, ``without_exclusion``, ``excluded_by``, ``set_factory``,
  ``can_host_elsewhere``;
- dropping the exclusion of a trial whose actor request is pending (:mod:`.placement`): the
  ``TuneController``'s private bookkeeping (``_trial_to_actor``, ``_actor_to_trial``,
  ``_staged_trials``, ``_actor_cache.decrease_max``, ``_resources_to_pending_trials``,
  ``_actor_manager.is_actor_started``/``remove_actor``, which cancels the pending resource
  request), reached through a wrapper of ``TuneController._schedule_trial_actor`` installed
  only when the policy asks for it: ``track_controller``, ``set_factory``.

Why an actor died, after the fact (:mod:`.deaths`; the exception as raised is read in
:mod:`statemachine.tune.ray_errors`, public names only), checked in both, the gate
``compat.death_cause_support``:

- the GCS actor table's ``State`` and ``DeathCause`` (``ray._private.state.state.
  actor_table``, internal; an ``ActorDeathCause`` protobuf message, read with protobuf's
  ``MessageToDict``): ``actor_table_death``. Same;
- ``ray.util.state.get_actor(id, timeout=)``'s ``death_cause`` (DeveloperAPI, needs the
  dashboard): ``state_api_death``. Same;
- ``ray.nodes()``' ``Alive``, ``DeathReason``, ``DeathReasonMessage``: ``node_death``; the
  protobufs' ``ActorDiedErrorContext.node_death_info`` and ``ActorDeathCause``'s ``context``
  oneof (``ray.core.generated.common_pb2``): ``has_node_death_info``. Same;
- the drill: ``ray._raylet.GcsClient(address=).drain_node(node_id, reason, message,
  deadline_ms)`` with ``autoscaler_pb2.DrainNodeReason`` ``DRAIN_NODE_REASON_PREEMPTION``
  (internal, not a public API; as Ray's ``python/ray/tests/test_draining.py``):
  ``drain_node``. Same.


What the log knows, written into a trial that ``Tuner.restore`` brought back (issue 27; applied
by :mod:`statemachine.tune.resume_from_log`), all checked in the source of 2.40.0 and 2.60.0:

- the moment to do it (:mod:`.requeue`): ``TuneController._requeue_restored_trials(trials,
  resume_config)`` (private, wrapped once per process: the controller's restored trials go to
  a hook before Ray requeues them) and ``controller._callbacks._callbacks`` (the
  ``CallbackList``'s list, read), the ``resume_config`` it is called with (its ``finished``,
  ``unfinished``, ``errored``: ``ResumeConfig.ResumeType`` values, read: ``resume_types``;
  what ``Tuner.restore``'s options asked for, applied to the trials Ray creates again later)
  and, after the requeue, for each trial the hook ended,
  ``controller._search_alg.on_trial_complete(trial_id, result, error)`` (called, as Ray does
  when a trial ends): ``install``. Same.
- the trial (:mod:`.trials`): ``trial.status`` (written, before the requeue, with
  ``invalidate_json_state()``): ``set_restored_status``; ``run_metadata.last_result`` and
  ``.last_result_time`` (written, ``invalidate_cache()``): ``set_last_result``;
  ``run_metadata.error_filename``/``.pickled_error_filename`` (written; Ray reads them
  relative to the trial's folder): ``set_error_files``; ``trial.error_file`` and
  ``trial.pickled_error_file`` (properties, read: the files ``handle_error`` wrote in the
  driver's staging folder, which Ray copies to storage only with its experiment state):
  ``local_error_files``; ``run_metadata.last_result`` (read):
  ``last_result``, ``last_iteration``; the trial's folder on its storage filesystem
  (``get_file_info``, ``open_input_stream``, read; ``storage.trial_dir_name``, read: ``None``
  until Ray names the folder, when ``trial_fs_path`` raises): ``has_folder_name``,
  ``trial_folder_names``,
  ``read_trial_file``, ``folder_files``; (``create_dir``, ``open_output_stream``, written:
  the log's own file beside Ray's, never one of Ray's): ``write_trial_file``. Same.
- the checkpoints (:mod:`.checkpoint_manager`): ``_CheckpointManager.register_checkpoint``
  (called with a ``_TrainingResult(Checkpoint(path, filesystem), metrics)``, as
  ``Trial.on_checkpoint`` does), ``trial.storage.current_checkpoint_index`` (written: the
  next checkpoint's number follows the newest), ``latest_checkpoint_result.metrics`` (read):
  ``advance_to``, ``checkpoint_metrics``. Same.
- a trial Ray created after its last save, which its search algorithm creates again after the
  restore (same id and config; ``Trial.__init__`` leaves ``relative_logdir`` ``None`` and
  ``init_local_path``, at the actor's start, names a new folder only then): the moment
  (:mod:`.requeue`), ``TuneController.add_trial(trial)`` (wrapped once per process, the hook
  called before it, then ``_search_alg.on_trial_complete`` for a trial the hook ended):
  ``install_add``; the folder (:mod:`.trials`), ``trial.relative_logdir`` and
  ``trial.storage.trial_dir_name`` (written, with ``invalidate_json_state()``, as
  ``init_local_path`` does): ``point_to_folder``; the experiment folder's entries on its
  storage filesystem (read): ``experiment_folder_names``, and a file in one of them (the
  log's last result of an ended trial, read): ``read_experiment_file``. Same.

Outside this package Ray is used only through public names: ``ray.tune.Callback`` (base of
:class:`~statemachine.tune.EventLogCallback`), ``ray.__version__`` and the ``Tuner``'s
``RunConfig``, ``FailureConfig``, ``CheckpointConfig`` (only in ``ray.train`` in 2.40; in
``ray.tune`` in 2.60, which emits a ``RayDeprecationWarning`` when ``ray.train``'s are passed
to a ``Tuner``) in :mod:`statemachine.tune.compat`, and
``ray.exceptions.RayTaskError``/``RayActorError`` (``.cause``, ``.preempted``,
``.actor_init_failed``, ``.traceback_str``, the exception types and ``str()``) in
:mod:`statemachine.tune.ray_errors`.
"""
