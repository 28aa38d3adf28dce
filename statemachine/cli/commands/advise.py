"""``trial-replay advise [EXPERIMENT ...]``: which retry policy would have saved the trials
that ended ERROR, at what cost, with the evidence (docs/cli.md, "advise")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from statemachine.advise import Advice, Grid, advise
from statemachine.advise.reader import read_histories
from statemachine.advise.recommend import exposure
from statemachine.advise.stats import Estimate
from statemachine.advise.sweep import describe
from statemachine.cli.db import BadInput, open_store
from statemachine.cli.output import Column, Output, json_option, wide_option
from statemachine.cli.params import FiniteFloat, count
from statemachine.cli.reading import require_experiment
from statemachine.distribution import install_hint
from statemachine.domain.policy import ExhaustionAction, RestorePhase


class IntListType(click.types.StringParamType):
    """``0..5`` or ``0,1,3`` (``none``: unlimited, where allowed)."""

    name = "LIST"

    def __init__(self, minimum: int, allow_none: bool = False) -> None:
        self.minimum = minimum
        self.allow_none = allow_none

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """Parse the list; one line naming the option for anything else."""
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        out: list[int | None] = []
        try:
            if ".." in text:
                first, last = (int(p) for p in text.split("..", 1))
                if last < first or last - first > 100:
                    raise ValueError
                out = list(range(first, last + 1))
            else:
                for part in text.split(","):
                    part = part.strip()
                    out.append(None if self.allow_none and part == "none" else int(part))
        except ValueError:
            self.fail(f"{value!r} is not a range A..B (at most 100 apart) or a comma list of "
                      "integers" + (" or none" if self.allow_none else ""), param, ctx)
        if any(v is not None and not self.minimum <= v <= 2**31 - 1 for v in out):
            self.fail(f"{value!r}: every value must be >= {self.minimum}", param, ctx)
        return tuple(dict.fromkeys(out))


class ChoiceListType(click.types.StringParamType):
    """A comma list of choices (``all``: every one)."""

    name = "LIST"

    def __init__(self, choices: list[str]) -> None:
        self.choices = choices

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """Parse the list."""
        if isinstance(value, tuple):
            return value
        parts = [p.strip() for p in str(value).split(",")]
        if parts == ["all"]:
            return tuple(self.choices)
        bad = [p for p in parts if p not in self.choices]
        if bad:
            self.fail(f"{bad[0]!r} is not one of {', '.join(self.choices)} (or all)", param,
                      ctx)
        return tuple(dict.fromkeys(parts))


@click.command("advise")
@click.argument("experiments", nargs=-1)
@click.option("--restore-retries", type=IntListType(0), default="0..5", show_default=True,
              help="restore_retry_num values to try: A..B or a comma list.")
@click.option("--max-failures", type=IntListType(-1), default="0,1,2,3", show_default=True,
              help="max_failures values to try (-1: unlimited).")
@click.option("--on-restore-exhausted",
              type=ChoiceListType([a.value for a in ExhaustionAction]),
              help="on_restore_exhausted values to try (comma list, or all). Default: as "
                   "recorded.")
@click.option("--avoid-failed-nodes", type=click.Choice(["recorded", "on", "off", "both"]),
              default="recorded", show_default=True, help="avoid_failed_nodes values to try.")
@click.option("--max-preemptions", type=IntListType(0, allow_none=True),
              help="max_preemptions values to try (none: unlimited). Default: as recorded.")
@click.option("--restore-phase", type=ChoiceListType([p.value for p in RestorePhase]),
              help="restore_phase values to try (comma list, or all). Default: as recorded.")
@click.option("--samples", type=count(1, 100_000), default=200, show_default=True,
              help="Monte Carlo samples per policy (fewer when many trials are continued).")
@click.option("--seed", type=count(0, 2**63 - 1), default=0, show_default=True,
              help="Seed of the simulation: the same seed, the same figures.")
@click.option("--target", type=FiniteFloat(0.01, 1.0), default=0.9, show_default=True,
              help="Recommend the cheapest policy saving this share of the best one's.")
@click.option("--jobs", type=count(1, 64), default=min(2, os.cpu_count() or 1),
              show_default="2, or 1 on one core",
              help="Processes the sweep runs in (the figures do not depend on it).")
@click.option("-o", "--output", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw the front: FILE.html or FILE.png.")
@json_option
@wide_option
@click.pass_obj
def advise_command(
    out: Output, experiments: tuple[str, ...], restore_retries: tuple[int, ...],
    max_failures: tuple[int, ...], on_restore_exhausted: tuple[str, ...] | None,
    avoid_failed_nodes: str, max_preemptions: tuple[int | None, ...] | None,
    restore_phase: tuple[str, ...] | None, samples: int, seed: int, target: float,
    jobs: int, path: Path | None, as_json: bool,
) -> int:
    """Which retry policy would have saved the trials that ended ERROR, at what cost: the
    estimates the log supports (with intervals), a sweep of policies replayed through the
    state machine (simulated from the estimates past the end of the record) and the
    cheapest policy on the front, as code to paste. No EXPERIMENT: every experiment."""
    if path is not None:
        _check_output(path)
    grid = Grid(
        restore_retry_num=restore_retries,
        max_failures=max_failures,
        on_restore_exhausted=tuple(ExhaustionAction(a) for a in on_restore_exhausted)
        if on_restore_exhausted else (None,),
        avoid_failed_nodes={"recorded": (None,), "on": (True,), "off": (False,),
                            "both": (False, True)}[avoid_failed_nodes],
        max_preemptions=max_preemptions or (None,),
        restore_phase=tuple(RestorePhase(p) for p in restore_phase)
        if restore_phase else (None,),
    )
    if len(grid.changes()) > 5000:
        raise BadInput(f"the sweep has {len(grid.changes())} policies; narrow the lists "
                       "(at most 5000)")
    with open_store(out.db) as store:
        if experiments:
            names = [require_experiment(store, name) for name in dict.fromkeys(experiments)]
        else:
            names = [info.name for info in store.list_experiments()]
            if not names:
                raise BadInput("this event log holds no experiment yet")
        read = read_histories(store, names)
    for warning in read.warnings:
        out.warn(warning)
    result = advise(read.histories, grid, experiments=names, samples=samples, seed=seed,
                    target=target, jobs=jobs)
    if path is not None:
        from statemachine.cli.advise_plot import write_plot

        try:
            write_plot(result, path)
        except OSError as exc:
            raise BadInput(f"cannot write the plot to {path}: "
                           f"{exc.strerror or exc.__class__.__name__}") from None
    if as_json:
        out.json(result.to_dict())
    else:
        _show(out, result, path)
    return out.exit_code


def _check_output(path: Path) -> None:
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("html", "png"):
        raise BadInput(f"advise -o must end in .html or .png, got {path.name!r}")
    if not path.parent.is_dir():
        raise BadInput(f"no such folder for the plot: {path.parent}")
    if fmt == "png":
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise BadInput(f"a PNG plot needs matplotlib: {install_hint('plot')} "
                           "(or write .html)") from None


def _p(e: Estimate) -> list[str]:
    if e.value is None or e.low is None or e.high is None:
        return ["not observed", "", "0"]
    return [f"{e.value:.0%}", f"{e.low:.0%}-{e.high:.0%}", f"{e.events} of {e.n}"]


def _rate(e: Estimate) -> list[str]:
    if e.value is None or e.low is None or e.high is None or e.exposure is None:
        return ["not observed", "", "0 h"]
    return [f"{e.value:.3g}", f"{e.low:.3g}-{e.high:.3g}",
            f"{e.events} in {exposure(e.exposure)}"]


def _seconds(value: float | None) -> str:
    return "not observed" if value is None else f"{value:.0f} s"


def _show(out: Output, advice: Advice, path: Path | None) -> None:
    e = advice.estimates
    out.text(f"Advice for {', '.join(advice.experiments)}: {e.trials} trials, {e.errored} "
             f"ended ERROR, {e.failures} failures; recorded policy "
             f"restore_retry_num={advice.recorded.restore_retry_num} "
             f"max_failures={advice.recorded.max_failures}")
    rows = [["restore attempt succeeds", *_p(e.restore)]]
    rows += [[f"  restore attempt {k} of an episode", *_p(v)]
             for k, v in sorted(e.restore_by_number.items())]
    if len(e.restore_by_node) > 1:
        rows += [[f"  on node {k}", *_p(v)] for k, v in sorted(e.restore_by_node.items())]
    if e.restore_avoiding.n and e.restore_not_avoiding.n:
        rows += [["  with avoid_failed_nodes", *_p(e.restore_avoiding)],
                 ["  without avoid_failed_nodes", *_p(e.restore_not_avoiding)]]
    if e.retry_elsewhere.n or e.retry_same_node.n:
        rows += [["  retry on another node", *_p(e.retry_elsewhere)],
                 ["  retry on the same node", *_p(e.retry_same_node)]]
    rows += [["training failures per hour", *_rate(e.training_hazard)],
             ["preemptions per node-hour", *_rate(e.preemption_rate)],
             ["lost work per failure (mean, median)",
              f"{_seconds(e.costs.lost_mean_s)}, {_seconds(e.costs.lost_median_s)}", "",
              f"{e.costs.failures} failures"],
             ["back to training after a failure",
              f"{_seconds(e.costs.recovery_mean_s)}, {_seconds(e.costs.recovery_median_s)}",
              "", f"{e.costs.recoveries} recoveries"]]
    out.table([Column("estimate", prose=True), Column("value", justify="right"),
               Column("95% interval", 1, justify="right"),
               Column("observations", 2, justify="right")], rows,
              title="What the log shows", status_column=None)
    for d in e.deterministic:
        out.text(f"No budget saves {d.experiment}/{d.trial_id}: {d.evidence}")
    rec = advice.recommendation
    out.table(
        [Column("policy (the front)", prose=True), Column("saved", justify="right"),
         Column("95%", 1, justify="right"), Column("lost", 1, justify="right"),
         Column("extra attempts", justify="right"),
         Column("extra attempt-h", justify="right"),
         Column("simulated", 2, justify="right")],
        [[describe(r.changes), f"{r.saved_mean:.1f} of {r.errored}",
          "{:.0f}-{:.0f}".format(*r.saved_interval()), str(r.lost),
          f"{r.extra_attempts:+.1f}", f"{r.extra_hours:+.1f}", str(r.simulated)]
         for r in rec.front],
        title=f"{len(advice.results)} policies swept ({advice.samples} samples, seed "
              f"{advice.seed}); the front of trials saved against extra compute",
        status_column=None)
    out.text(("Recommendation: " if rec.verdict == "recommend" else "") + rec.why)
    for line in rec.code:
        out.text(f"    {line}")
    for line in rec.evidence:
        out.text(f"  - {line}")
    if path is not None:
        out.text(f"Wrote {path}")
