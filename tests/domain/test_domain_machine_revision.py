"""The machine's revision (the snapshots' tag) goes up whenever what a fold computes changes.

``golden/machine_revision.json`` records, for ``MACHINE_REVISION``: the transition table
(every rule in guard order, its guards, effects and destination, and which trigger each
event type fires), the state's encoding, a digest of folding a fixed corpus of seeded random
histories under many policies (every record and final state), and a digest of the domain
code the fold runs (docstrings and comments left out). The table, the encoding or the
corpus changing without a new revision fails, and re-recording refuses to keep the old
revision: a snapshot of the old machine would be trusted by the new one. Code that changed
while the corpus did not (a refactor) may be re-recorded under the same revision:
``UPDATE_GOLDEN=1 python -m pytest tests/domain/test_domain_machine_revision.py``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import os
import random
import tokenize
from pathlib import Path
from typing import Any

from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import (
    EVENT_TYPES,
    CheckpointSaved,
    CheckpointsDiscarded,
    CountersAdopted,
    DeathCauseLearned,
    Event,
    ExperimentRenamed,
    FirstResult,
    NodeAvoidanceDropped,
    NodesAvoided,
    PolicySet,
    RestoreSucceeded,
    ResumeAdvanced,
    ResumeNotAdvanced,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialRecreated,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.failures import AbortError, ActorError, RestoreError, TrainingError
from statemachine.domain.machine import MACHINE, MACHINE_REVISION, apply
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import ExhaustionAction, RestorePhase, RetryPolicy
from statemachine.domain.state import CHECKPOINT_HISTORY, TrialState
from statemachine.exceptions import InvalidTransitionError

GOLDEN = Path(__file__).resolve().parent / "golden" / "machine_revision.json"
DOMAIN = Path(__file__).resolve().parents[2] / "statemachine" / "domain"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def table() -> list[str]:
    """Every transition in guard order, as people read it."""
    lines = []
    for trigger, event in MACHINE.events.items():
        for source, transitions in event.transitions.items():
            for t in transitions:
                effects = ", ".join(getattr(f, "__name__", str(f)) for f in t.before)
                lines.append(f"{trigger} {source}: {t.rule.name} [{', '.join(t.rule.guards)}] "
                             f"-> {t.dest} | {effects}")
    lines += [f"event {name} -> {cls.trigger}" for name, cls in sorted(EVENT_TYPES.items())]
    return lines


def encoding() -> list[str]:
    """The state's fields and encoding (a snapshot's shape)."""
    return [f"history={CHECKPOINT_HISTORY}", *TrialState("t").to_dict()]


# ---------------------------------------------------------------- the corpus


#: Rules per cause a policy of the corpus may carry (``on_cause``, ``cause_budgets``).
_CAUSE_RULES: list[tuple[dict[str, str], dict[str, int]]] = [
    ({}, {}), ({}, {}),
    ({"oom": "give_up", "node_died": "retry_not_counted"}, {"node_died": 1}),
    ({"node_died": "retry_not_counted", "unknown": "retry_not_counted"}, {}),
    ({"preempted": "give_up", "worker_crashed": "count"}, {}),
    ({"preempted": "count", "oom": "retry_not_counted"}, {"oom": 0}),
]


def _policy(rng: random.Random) -> RetryPolicy:
    on_cause, budgets = rng.choice(_CAUSE_RULES)
    return RetryPolicy(
        max_failures=rng.choice([-1, 0, 1, 3]),
        restore_retry_num=rng.choice([0, 1, 2]),
        on_restore_exhausted=rng.choice(list(ExhaustionAction)),
        count_preemption_as_failure=rng.random() < 0.3,
        max_preemptions=rng.choice([None, None, 0, 1]),
        fatal_exception_types=rng.choice([(), ("builtins.KeyError",)]),
        restore_phase=rng.choice(list(RestorePhase)),
        avoid_failed_nodes=rng.random() < 0.3,
        on_cause=on_cause,
        cause_budgets=budgets,
        give_up_on_repeats=rng.choice([None, None, 2, 3]),
    )


_NODES = [None, NodeRef("a" * 56, "10.0.0.7"), NodeRef("b" * 56, "10.0.0.8"),
          NodeRef(node_ip="10.0.0.9")]
_CHECKPOINTS = ["c0", "c1", "c2", "c3"]


_DEATHS = [ActorDeath(DeathCause.PREEMPTED, "NODE_DIED/AUTOSCALER_DRAIN_PREEMPTED", "spot"),
           ActorDeath(DeathCause.NODE_DIED, "NODE_DIED/UNEXPECTED_TERMINATION",
                      "health check failed"),
           ActorDeath(DeathCause.OOM, "oom_context"), ActorDeath(DeathCause.WORKER_CRASHED),
           ActorDeath()]


def _failure(rng: random.Random) -> TrialFailed:
    cause = rng.choice(["builtins.ValueError", "builtins.KeyError", "builtins.OSError"])
    error = rng.choice([
        RestoreError(cause, "load"), TrainingError(cause, "train"),
        ActorError("ray.exceptions.RayActorError", "died", preempted=rng.random() < 0.5),
        ActorError("ray.exceptions.ActorDiedError", "died", death=rng.choice(_DEATHS)),
        AbortError("ray.tune.error._AbortTrialExecution", "abort"),
    ])  # fmt: skip
    return TrialFailed(error=error, node=rng.choice(_NODES),
                       iteration=rng.choice([None, 3, 3, 4]))


def _event(rng: random.Random, trigger: str) -> Event:
    ckpt = rng.choice(_CHECKPOINTS)
    return {
        "add": lambda: TrialAdded(),
        "start": lambda: TrialStarted(restore_from=rng.choice([None, None, ckpt]),
                                      node=rng.choice(_NODES)),
        "restored": lambda: RestoreSucceeded(),
        "first_result": lambda: FirstResult(iteration=rng.randint(1, 9)),
        "checkpoint": lambda: CheckpointSaved(ckpt),
        "pause": lambda: TrialPaused(),
        "resume": lambda: TrialResumed(),
        "complete": lambda: TrialCompleted(),
        "stop": lambda: TrialStopped(),
        "reset": lambda: TrialReset(from_scratch=rng.random() < 0.3),
        "discard_checkpoints": lambda: CheckpointsDiscarded(checkpoints=(ckpt,)),
        "set_policy": lambda: PolicySet(policy=_policy(rng)),
        "avoid_nodes": lambda: NodesAvoided(nodes=("a" * 56,)),
        "drop_avoidance": lambda: NodeAvoidanceDropped(nodes=("a" * 56,), reason="timeout"),
        "adopt_counters": lambda: CountersAdopted(failures=rng.randint(0, 3),
                                                  preemptions=rng.randint(0, 2)),
        "recreate": lambda: TrialRecreated(),
        "note_rename": lambda: ExperimentRenamed(old_name="a", new_name="b"),
        "fail": lambda: _failure(rng),
        "learn_cause": lambda: DeathCauseLearned(failure_seq=rng.randint(1, 40),
                                                 death=rng.choice(_DEATHS), source="state_api"),
        "advance_resume": lambda: ResumeAdvanced(from_checkpoint=None, to_checkpoint=ckpt,
                                                 iterations_saved=rng.randint(0, 9)),
        "keep_resume": lambda: ResumeNotAdvanced(checkpoint=ckpt, reason="missing"),
    }[trigger]()


#: Histories the random ones rarely reach (a failure of the user's own load after a restore
#: whose retries were spent), folded under every exhaustion action, retry budget and phase.
ANCHORS: list[list[Event]] = [
    # a resume after a driver crash: advanced (finished, then training) and kept, as recorded
    [TrialAdded(), TrialStarted(), CheckpointSaved("c0"), TrialCompleted(),
     ResumeAdvanced(from_checkpoint=None, to_checkpoint="c0", iterations_saved=1,
                    finished="TERMINATED"),
     ResumeNotAdvanced(checkpoint="c0", reason="missing"), TrialResumed(), TrialStarted(),
     ResumeAdvanced(from_checkpoint="c0", to_checkpoint="c0", iterations_saved=0)],
    [TrialAdded(), TrialStarted(), CheckpointSaved("c0"), CheckpointSaved("c1"),
     TrialFailed(TrainingError("builtins.ValueError", "nan")), TrialStarted(),
     RestoreSucceeded(), TrialFailed(RestoreError("builtins.OSError", "load")),
     TrialStarted(), RestoreSucceeded(), TrialFailed(TrainingError("builtins.OSError", "x"))],
    # a trial already past max_failures, resumed: its own load's retry is refused
    [TrialAdded(), TrialStarted(), CheckpointSaved("c0"), CountersAdopted(failures=5),
     TrialFailed(TrainingError("builtins.ValueError", "nan")), TrialReset(), TrialStarted(),
     RestoreSucceeded(), TrialFailed(RestoreError("builtins.OSError", "load"))],
]


def _anchors(digest: Any, fired: set[str]) -> None:
    for history in ANCHORS:
        for action in ExhaustionAction:
            for retries in (0, 1, 2):
                for phase in RestorePhase:
                    state = TrialState("t")
                    policy = RetryPolicy(max_failures=3, restore_retry_num=retries,
                                         on_restore_exhausted=action, restore_phase=phase)
                    for event in history:
                        try:
                            record = apply(state, event, policy)
                        except InvalidTransitionError:
                            digest.update(b"invalid")
                            continue
                        assert record.rule is not None
                        fired.add(("user:" if record.rule.user_restore else "")
                                  + str(record.rule.name))
                        digest.update(json.dumps(record.to_dict(), sort_keys=True).encode())
                    digest.update(json.dumps(state.to_dict(), sort_keys=True).encode() + b"\n")


@functools.cache
def corpus(histories: int = 2000, length: int = 40) -> tuple[str, frozenset[str]]:
    """Fold seeded random histories through the Machine: a digest of every outcome (each
    record and final state), and the rules that fired (``name`` or ``user:name``)."""
    rng = random.Random(20261202)
    # the records of a resume (issue 27) change nothing; they are folded in ANCHORS, so the
    # random corpus (and the rules it reaches) stays the one of revision 2
    triggers = sorted(t for t in MACHINE.events if t not in ("advance_resume", "keep_resume"))
    digest = hashlib.sha256()
    fired: set[str] = set()
    for _ in range(histories):
        state = TrialState("t")
        what_if = _policy(rng) if rng.random() < 0.5 else None
        for _ in range(rng.randint(0, length)):
            valid = [t for t in triggers if state.status.value in MACHINE.events[t].transitions]
            trigger = rng.choice(valid if rng.random() < 0.95 else triggers)
            # more failures, most of all in the stretch after a restore (the user's restore)
            if "fail" in valid and rng.random() < (0.6 if state.unconfirmed_restore else 0.3):
                trigger = "fail"
            event = _event(rng, trigger)
            try:
                record = apply(state, event, what_if)
            except InvalidTransitionError:
                digest.update(f"invalid {event.type_name} {state.status}\n".encode())
                continue
            assert record.rule is not None
            fired.add(("user:" if record.rule.user_restore else "") + str(record.rule.name))
            digest.update(json.dumps(record.to_dict(), sort_keys=True).encode() + b"\n")
        digest.update(json.dumps(state.to_dict(), sort_keys=True).encode() + b"\n")
    _anchors(digest, fired)
    return digest.hexdigest(), frozenset(fired)


# ---------------------------------------------------------------- the code


def _code_text(path: Path) -> str:
    """A module's source without docstrings, comments and blank lines."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    drop: set[int] = set()
    for node in ast.walk(ast.parse(source)):  # a string alone: a (module, class, attribute) doc
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            drop.update(range(node.lineno - 1, (node.end_lineno or node.lineno)))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col]
    kept = [line.rstrip() for i, line in enumerate(lines) if i not in drop]
    return "\n".join(line for line in kept if line.strip())


def fold_modules() -> list[Path]:
    """The domain modules the fold imports: ``compiled.py`` and, transitively, the domain
    modules it imports (read from their source, so the answer never depends on what else the
    test session imported)."""
    found: set[Path] = set()
    todo = [DOMAIN / "compiled.py"]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "statemachine.domain."):
                todo.append(DOMAIN / f"{node.module.rsplit('.', 1)[1]}.py")  # type: ignore[union-attr]
    return sorted(found)


def code_digest() -> str:
    digest = hashlib.sha256()
    for path in fold_modules():
        digest.update(f"{path.name}\n{_code_text(path)}\n".encode())
    return digest.hexdigest()


# ---------------------------------------------------------------- the test


def current() -> dict[str, Any]:
    return {"revision": MACHINE_REVISION, "table": table(), "encoding": encoding(),
            "corpus": corpus()[0], "code": code_digest()}


def test_the_machine_changes_only_with_a_new_revision() -> None:
    now = current()
    recorded = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else None
    behaviour = ("table", "encoding", "corpus")
    changed = [k for k in behaviour if recorded is None or recorded[k] != now[k]]
    same_revision = recorded is not None and recorded["revision"] == MACHINE_REVISION
    if UPDATE:
        assert not (same_revision and changed), (
            f"what a fold computes changed ({', '.join(changed)}): raise MACHINE_REVISION "
            "(statemachine/domain/machine.py) so that older snapshots are not trusted")
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(now, indent=1) + "\n")
        return
    assert recorded is not None, "no golden: run with UPDATE_GOLDEN=1"
    assert recorded["revision"] == MACHINE_REVISION, (
        f"MACHINE_REVISION is {MACHINE_REVISION}, the golden records {recorded['revision']}: "
        "run with UPDATE_GOLDEN=1 to record the new machine")
    for key in behaviour:
        assert recorded[key] == now[key], (
            f"the machine's {key} changed without a new revision: raise MACHINE_REVISION "
            "(statemachine/domain/machine.py), then run with UPDATE_GOLDEN=1")
    assert recorded["code"] == now["code"], (
        "the domain code the fold runs changed: if what a fold computes can change for some "
        "history, raise MACHINE_REVISION; if not (a refactor), record it with UPDATE_GOLDEN=1")


def test_the_corpus_reaches_every_rule() -> None:
    # The corpus digest is only as good as what it exercises: every rule of the machine
    # (the user's-restore variants too) fires in it, so a changed guard or effect of any
    # rule shows in the digest.
    every = {("user:" if t.rule.user_restore else "") + str(t.rule.name)
             for e in MACHINE.events.values() for ts in e.transitions.values() for t in ts}
    assert every - corpus()[1] == set()
