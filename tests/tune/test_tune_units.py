"""Parts of the Tune integration that need no Ray cluster: versions, paths, the error file,
the docs' example, and where Ray's internals are touched."""

from __future__ import annotations

import ast
import os
import re
import warnings
from pathlib import Path

import pytest

from statemachine.domain.compiled import apply_compiled as apply
from statemachine.domain.events import (
    CheckpointSaved,
    PolicySet,
    TrialAdded,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.failures import RestoreError, TrainingError
from statemachine.domain.machine import fold
from statemachine.domain.policy import RetryPolicy
from statemachine.tune.checkpoints import refusal
from statemachine.tune.compat import UnsupportedRayError, check_version, parse_version
from statemachine.tune.errorfile import rewrite_last_header


@pytest.mark.parametrize("version", ["2.40.0", "2.60.0", "2.99.1rc1"])
def test_supported_ray_versions(version: str) -> None:
    check_version(version)


@pytest.mark.parametrize("version", ["1.13.0", "2.9.3", "3.0.0", "nightly"])
def test_unsupported_ray_versions_are_refused_with_the_fix(version: str) -> None:
    with pytest.raises(UnsupportedRayError) as info:
        check_version(version)
    message = str(info.value)
    assert version in message or "cannot read" in message
    if "cannot read" not in message:
        assert "pip install" in message and "2.60" in message


def test_error_file_tells_restore_retries_from_failures(tmp_path: Path) -> None:
    policy = RetryPolicy(max_failures=2, restore_retry_num=2)
    state, _ = fold("t1", [PolicySet(policy), TrialAdded(), TrialStarted(),
                           CheckpointSaved("c1")])
    recover = apply(state, TrialFailed(TrainingError("builtins.ValueError", "boom")))
    apply(state, TrialStarted())
    retry = apply(state, TrialFailed(RestoreError("builtins.OSError", "gone")))
    file = tmp_path / "error.txt"
    ray_text = "Failure # 1 (occurred at 2026-01-01_10-00-00)\nValueError: boom\n"
    file.write_text(ray_text)
    assert rewrite_last_header(file, recover, policy)
    # Ray appends its next failure (its own count), the seam rewrites only that header.
    with file.open("a") as out:
        out.write("Failure # 2 (occurred at 2026-01-01_10-00-05)\nOSError: gone\n")
    assert rewrite_last_header(file, retry, policy)
    lines = file.read_text().splitlines()
    assert lines == [
        "Failure # 1 (occurred at 2026-01-01_10-00-00) [TrainingError; decision RECOVER]",
        "ValueError: boom",
        "Restore failure # 1 (retry 1 of 2) (occurred at 2026-01-01_10-00-05)",
        "OSError: gone",
    ]
    assert not rewrite_last_header(tmp_path / "missing.txt", recover, policy)


def test_checkpoint_deletion_refuses_paths_outside_the_trial(tmp_path: Path) -> None:
    trial = tmp_path / "exp" / "trial_1"
    inside = trial / "checkpoint_000000"
    inside.mkdir(parents=True)
    outside = tmp_path / "precious"
    outside.mkdir()
    (trial / "escape").symlink_to(outside, target_is_directory=True)
    assert refusal(str(inside), str(trial), local=True) is None
    assert "'..'" in refusal(f"{trial}/../trial_2/checkpoint_000000", str(trial), True)
    assert "not inside" in refusal(str(outside), str(trial), True)
    assert "not inside" in refusal(str(trial), str(trial), True)
    assert "not inside" in refusal(f"{trial}_other/checkpoint_0", str(trial), True)
    assert "symlink" in refusal(str(trial / "escape"), str(trial), True)
    assert "symlink" in refusal(str(trial / "escape" / "sub"), str(trial), True)
    assert "NUL" in refusal(f"{trial}/checkpoint_0\x00", str(trial), True)
    # Remote filesystems have no symlinks to check, the path rules still hold.
    assert refusal("bucket/exp/trial_1/checkpoint_000001", "bucket/exp/trial_1", False) is None
    assert "'..'" in refusal("bucket/exp/trial_1/../x", "bucket/exp/trial_1", False)
    assert os.path.isdir(outside)


REPO = Path(__file__).resolve().parents[2]

#: Attributes of Ray's objects (``Trial``, its storage, checkpoint manager and metadata, the
#: placement group factory, the ``TuneController``) that only ``statemachine/tune/ray_surface/``
#: may touch.
RAY_INTERNALS = {
    "run_metadata", "temporary_state", "storage", "latest_checkpoint_result",
    "checkpoint_manager", "num_restore_failures", "is_restoring", "error_file",
    "experiment_dir_name", "experiment_fs_path", "trial_fs_path", "storage_filesystem",
    "_restore_checkpoint_result", "_latest_checkpoint_result", "_checkpoint_results",
    "best_checkpoint_results", "invalidate_cache", "invalidate_json_state", "handle_error",
    "on_restore", "set_status", "should_recover", "last_result", "num_failures",
    # nodes and placement (avoid_failed_nodes)
    "placement_group_factory", "ray_actor", "_actor_id", "actor_table", "_trial_to_actor",
    "_actor_to_trial", "_staged_trials", "_actor_cache", "_resources_to_pending_trials",
    "_actor_manager", "_schedule_trial_actor", "head_bundle_is_empty", "bundles", "_kwargs",
    "_args",
    # a trial Ray's search algorithm creates again after a restore (issue 27)
    "relative_logdir", "trial_dir_name", "add_trial", "_requeue_restored_trials", "_search_alg",
}
SURFACE = REPO / "statemachine" / "tune" / "ray_surface"
_SURFACE_MODULE = "statemachine.tune.ray_surface"
_ATTRIBUTE_CALLS = {"getattr", "setattr", "hasattr", "delattr"}


def _in_surface(module: str) -> bool:
    return module == _SURFACE_MODULE or module.startswith(_SURFACE_MODULE + ".")


def _surface_names(tree: ast.AST) -> set[str]:
    """The names a module binds to the Ray surface's modules (``from statemachine.tune.
    ray_surface import trials as ray_trial``, ``import statemachine.tune.ray_surface``...)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if _in_surface(f"{node.module}.{alias.name}"):
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _in_surface(alias.name) and alias.asname:
                    names.add(alias.asname)
    return names


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def ray_internals_touched(source: str) -> list[str]:
    """Where ``source`` reaches into Ray's internals: an attribute of :data:`RAY_INTERNALS`
    (unless of the Ray surface's own modules), ``getattr``/``setattr``/``hasattr``/``delattr``
    of such a name or of any private one, or an import of a private Ray module or name."""
    tree = ast.parse(source)
    allowed = _surface_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in RAY_INTERNALS
                and not (isinstance(node.value, ast.Name) and node.value.id in allowed)):
            found.append((node.lineno, f".{node.attr}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _ATTRIBUTE_CALLS and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and (_is_private(node.args[1].value) or node.args[1].value in RAY_INTERNALS)):
            found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [f"{node.module}.{a.name}" for a in node.names] if node.module
                       else [])
            for module in modules:
                parts = module.split(".")
                if parts[0] == "ray" and any(_is_private(p) for p in parts[1:]):
                    found.append((node.lineno, f"import {module}"))
    return [f"{line} {what}" for line, what in sorted(found)]


def may_hold_ray_objects(path: Path, source: str) -> bool:
    """Whether a module can hold Ray's objects: it is in ``statemachine/tune/``, or it imports
    ``ray`` or ``statemachine.tune`` (deferred imports too). The others (the domain, the log,
    the read side) never get one, and their own fields may share Ray's names (a summary's
    ``num_failures``)."""
    if (REPO / "statemachine" / "tune") in path.parents:
        return True
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n == "ray" or n.startswith(("ray.", "statemachine.tune")) for n in names):
            return True
    return False


def test_only_ray_surface_touches_rays_internals() -> None:
    offenders, scanned = [], 0
    for path in sorted((REPO / "statemachine").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if SURFACE in path.parents or not may_hold_ray_objects(path, source):
            continue
        scanned += 1
        offenders += [f"{path.relative_to(REPO)}:{where}"
                      for where in ray_internals_touched(source)]
    assert offenders == []
    assert scanned >= 20, f"only {scanned} modules scanned: the scope test is broken"


def test_the_ray_surface_check_catches_each_way_of_reaching_in() -> None:
    """A module that reads, writes, ``getattr``s or imports Ray's internals is caught; the
    same reads through the surface's functions are not."""
    planted = """
import ray._private.state
from ray.train._internal.session import _TrainingResult
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.ray_surface.placement import factory
from statemachine.tune.ray_surface_lookalike import trials


def spy(trial, controller, exc):
    trials.run_metadata.num_failures = 0
    getattr(trial, "_restore_checkpoint_result")
    setattr(controller, "_staged_trials", set())
    hasattr(exc, "_actor_id")
    getattr(trial, "temporary_state", None)
    return ray_trial.storage_filesystem(trial), factory(trial), getattr(spy, "__name__")
"""
    found = ray_internals_touched(planted)
    assert found == [
        "2 import ray._private.state",
        "3 import ray.train._internal.session._TrainingResult",
        "10 .num_failures", "10 .run_metadata",
        "11 getattr(..., '_restore_checkpoint_result')",
        "12 setattr(..., '_staged_trials')",
        "13 hasattr(..., '_actor_id')",
        "14 getattr(..., 'temporary_state')",
    ]


def python_examples(doc: Path) -> list[str]:
    """The ``python`` code blocks of a Markdown file that build a ``tune.Tuner``."""
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    return [block for block in blocks if "tune.Tuner(" in block]


@pytest.mark.parametrize("doc", ["README.md", "docs/tune.md"])
def test_the_docs_tuner_example_runs_on_the_installed_ray_without_deprecations(
    doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example builds its Tuner on this Ray (2.40 has no ``tune.RunConfig``; 2.60 warns
    when ``ray.train``'s is used); the config is the one the example wrote."""
    from ray import tune

    class Trainable(tune.Trainable):  # type: ignore[misc]
        def step(self) -> dict[str, bool]:
            return {"done": True}

    monkeypatch.setenv("HOME", str(tmp_path))  # Ray's default storage: ~/ray_results
    (example,) = python_examples(REPO / doc)
    namespace: dict[str, object] = {"trainable": Trainable, "MyTrainable": Trainable}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(example, doc, "exec"), namespace)
    assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)] == []
    tuner = namespace["tuner"]
    assert isinstance(tuner, tune.Tuner)
    run_config = tuner._local_tuner.get_run_config()
    assert run_config.failure_config.max_failures == 3
    assert [type(c).__name__ for c in run_config.callbacks] == ["EventLogCallback"]


def test_tuner_config_classes_are_the_installed_rays_own() -> None:
    import ray.train
    import ray.tune

    import statemachine.tune as ours

    home = ray.tune if hasattr(ray.tune, "RunConfig") else ray.train
    for name in ("RunConfig", "FailureConfig", "CheckpointConfig"):
        assert getattr(ours, name) is getattr(home, name)


def test_the_oldest_supported_ray_is_the_one_ci_tests() -> None:
    """setup.cfg's lower bound, compat.MIN_RAY and the version .ci/run installs agree."""
    from statemachine.tune.compat import MIN_RAY, TESTED_RAY

    low = ".".join(map(str, MIN_RAY))
    setup = (REPO / "setup.cfg").read_text(encoding="utf-8")
    bounds = set(re.findall(r"ray\[tune\]>=([\d.]+),<3", setup))
    assert bounds == {low}
    (pinned,) = re.findall(r"^OLD_RAY=([\d.]+)$", (REPO / ".ci" / "run").read_text(), re.M)
    assert parse_version(pinned) == MIN_RAY
    assert TESTED_RAY[0] == pinned


def test_a_failure_the_seam_did_not_record_is_warned_about_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``on_trial_error``/``on_trial_recover`` for a failure the seam never reported (the
    callback joined a controller late): one warning, whatever the number of failures."""
    from types import SimpleNamespace

    from statemachine.tune import EventLogCallback
    from statemachine.tune import attempts as module

    monkeypatch.setattr(module, "_said_no_seam", False)
    callback = EventLogCallback()
    with caplog.at_level("WARNING", logger=module.__name__):
        for trial_id in ("a", "b"):
            trial = SimpleNamespace(trial_id=trial_id)
            callback.on_trial_recover(1, [trial], trial)
            callback.on_trial_error(1, [trial], trial)
    warned = [r for r in caplog.records if "not the error seam" in r.getMessage()]
    assert len(warned) == 1
    assert callback.hook_errors == 0
    # a failure the seam recorded in this step is not warned about
    monkeypatch.setattr(module, "_said_no_seam", False)
    trial = SimpleNamespace(trial_id="c")
    callback._attempts.failure_recorded(trial)
    caplog.clear()
    callback.on_trial_error(1, [trial], trial)
    assert not [r for r in caplog.records if "not the error seam" in r.getMessage()]


def test_every_tune_hook_of_the_callback_reports_its_errors_instead_of_raising() -> None:
    """An exception escaping a callback aborts the whole Tune run: every hook is guarded."""
    from types import SimpleNamespace

    from ray.tune import Callback

    from statemachine.tune import EventLogCallback

    hooks = [name for name in vars(EventLogCallback)
             if callable(getattr(Callback, name, None)) and not name.startswith("_")]
    assert "on_trial_result" in hooks and "on_trial_start" in hooks
    unguarded = [name for name in hooks
                 if not hasattr(getattr(EventLogCallback, name), "__wrapped__")]
    assert unguarded == []
    callback = EventLogCallback()
    broken = SimpleNamespace(trial_id="t1")  # no storage, no config: recording it fails
    callback._attempts.started(broken)  # its first result is awaited
    assert callback.on_trial_result(1, [broken], broken, {"training_iteration": 1}) is None
    assert callback.hook_errors == 1
