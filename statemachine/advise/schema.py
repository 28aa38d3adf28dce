"""The JSON schema of ``trial-replay advise --json`` (JSON Schema 2020-12; docs/cli.md,
"advise"). Keys are added, never renamed or removed, within a major version."""

from __future__ import annotations

from typing import Any

_NUMBER_OR_NULL: dict[str, Any] = {"type": ["number", "null"]}

_ESTIMATE: dict[str, Any] = {
    "type": "object",
    "required": ["value", "low", "high", "n", "events"],
    "properties": {
        "value": _NUMBER_OR_NULL, "low": _NUMBER_OR_NULL, "high": _NUMBER_OR_NULL,
        "n": {"type": "integer", "minimum": 0},
        "events": {"type": "integer", "minimum": 0},
        "exposure_hours": {"type": "number", "minimum": 0},
    },
    "additionalProperties": False,
}

_POLICY_RESULT: dict[str, Any] = {
    "type": "object",
    "required": ["changes", "described", "errored", "saved", "saved_low", "saved_high",
                 "lost", "extra_attempts", "extra_attempt_hours", "simulated_trials"],
    "properties": {
        "changes": {"type": "object"},
        "described": {"type": "string"},
        "errored": {"type": "integer", "minimum": 0},
        "saved": {"type": "number", "minimum": 0},
        "saved_low": {"type": "number", "minimum": 0},
        "saved_high": {"type": "number", "minimum": 0},
        "lost": {"type": "integer", "minimum": 0},
        "extra_attempts": {"type": "number"},
        "extra_attempt_hours": {"type": "number"},
        "simulated_trials": {"type": "integer", "minimum": 0},
        "on_front": {"type": "boolean"},
    },
    "additionalProperties": False,
}

ADVISE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "trial-replay advise --json",
    "type": "object",
    "required": ["experiments", "recorded_policy", "samples", "seed", "estimates", "sweep",
                 "recommendation"],
    "properties": {
        "experiments": {"type": "array", "items": {"type": "string"}},
        "recorded_policy": {"type": "object"},
        "samples": {"type": "integer", "minimum": 1},
        "seed": {"type": "integer"},
        "estimates": {
            "type": "object",
            "required": ["trials", "errored", "completed", "failures", "restore_success",
                         "restore_success_by_attempt", "restore_success_by_node",
                         "restore_success_avoiding_failed_nodes",
                         "restore_success_not_avoiding", "retry_success_on_another_node",
                         "retry_success_on_same_node", "training_failures_per_hour",
                         "preemptions_per_node_hour", "failure_cost", "deterministic",
                         "checkpoint_interval_s", "work_per_trial_s", "restore_attempt_s"],
            "properties": {
                "trials": {"type": "integer"}, "errored": {"type": "integer"},
                "completed": {"type": "integer"}, "failures": {"type": "integer"},
                "restore_success": _ESTIMATE,
                "restore_success_by_attempt": {"type": "object",
                                               "additionalProperties": _ESTIMATE},
                "restore_success_by_node": {"type": "object",
                                            "additionalProperties": _ESTIMATE},
                "restore_success_avoiding_failed_nodes": _ESTIMATE,
                "restore_success_not_avoiding": _ESTIMATE,
                "retry_success_on_another_node": _ESTIMATE,
                "retry_success_on_same_node": _ESTIMATE,
                "training_failures_per_hour": _ESTIMATE,
                "preemptions_per_node_hour": _ESTIMATE,
                "failure_cost": {
                    "type": "object",
                    "required": ["failures", "lost_work_mean_s", "lost_work_median_s",
                                 "recovery_mean_s", "recovery_median_s", "recoveries"],
                },
                "deterministic": {"type": "array", "items": {
                    "type": "object", "required": ["experiment", "trial_id", "evidence"]}},
                "checkpoint_interval_s": _NUMBER_OR_NULL,
                "work_per_trial_s": _NUMBER_OR_NULL,
                "restore_attempt_s": _NUMBER_OR_NULL,
            },
        },
        "sweep": {"type": "array", "items": _POLICY_RESULT},
        "recommendation": {
            "type": "object",
            "required": ["verdict", "policy", "retry_policy", "why", "evidence", "code"],
            "properties": {
                "verdict": {"enum": ["recommend", "keep", "not_enough_evidence"]},
                "policy": {"oneOf": [{"type": "null"}, _POLICY_RESULT]},
                "retry_policy": {"type": ["object", "null"]},
                "why": {"type": "string"},
                "evidence": {"type": "array", "items": {"type": "string"}},
                "code": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}
