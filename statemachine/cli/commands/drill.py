"""``trial-replay drill preempt NODE_ID``: preempt a node of a running local or test Ray
cluster as a cloud does, to check a retry setup before the cloud does it.

The node is drained through Ray's GCS with the reason *preemption* and a deadline (what Ray's
autoscaler does when a spot instance is reclaimed), then, once the deadline has passed, its
raylet is killed (``SIGKILL``, as a reclaimed machine vanishes): Ray then reports the actors
that ran there as dead because their node was preempted (``RayActorError.preempted``). The
raylet must run on this machine. It uses a Ray API that Ray marks as not public
(``GcsClient.drain_node``; see docs/tune.md, "Preemption drill").
"""

from __future__ import annotations

import os
import re
import signal
import time

import click

from statemachine.cli.db import BadInput
from statemachine.cli.output import Output
from statemachine.cli.params import FiniteFloat

_NODE_ID = re.compile(r"^[0-9a-f]{56}$")


@click.group("drill")
def drill() -> None:
    """Drills on a running local or test Ray cluster (never a production one)."""


@drill.command("preempt")
@click.argument("node_id")
@click.option("--address", envvar="RAY_ADDRESS", metavar="HOST:PORT", required=True,
              help="The cluster's GCS address (default: $RAY_ADDRESS).")
@click.option("--deadline-s", type=FiniteFloat(0, 3600), default=5.0, show_default=True,
              help="Seconds between the drain and the kill (Ray's drain deadline).")
@click.option("--message", default="preemption drill (trial-replay drill preempt)",
              show_default=True, help="The reason message Ray records for the node's death.")
@click.option("--kill/--no-kill", default=True, show_default=True,
              help="Kill the node's raylet after the deadline (--no-kill: only drain it).")
@click.pass_obj
def preempt(out: Output, node_id: str, address: str, deadline_s: float, message: str,
            kill: bool) -> int:
    """Drain NODE_ID (hex, as `ray list nodes` shows it) for preemption, wait past the
    deadline, then SIGKILL its raylet (found on this machine by its --node_id): the actors
    there die as preempted, as on a spot instance that is reclaimed."""
    from statemachine.tune.ray_surface import deaths

    node_id = node_id.strip().lower()
    if not _NODE_ID.match(node_id):
        raise BadInput(f"{node_id!r} is not a Ray node id (56 hex digits, as `ray list "
                       "nodes` shows it)")
    pids = deaths.raylet_pids(node_id)
    if kill and not pids:
        raise BadInput(f"no raylet of node {node_id} runs on this machine: run the drill "
                       "where the node runs, or pass --no-kill and stop the node yourself "
                       "after the deadline")
    deadline_ms = int(time.time() * 1000 + deadline_s * 1000)
    try:
        accepted, rejection = deaths.drain_node(address, node_id, message, deadline_ms)
    except Exception as exc:  # Ray's own error (no GCS there, an unknown node)
        raise BadInput(f"Ray refused to drain node {node_id} at {address}: {exc}") from None
    if not accepted:
        raise BadInput(f"Ray rejected draining node {node_id}: {rejection or 'no reason'}")
    out.text(f"Node {node_id} is draining for preemption (deadline in {deadline_s:g} s): "
             "Ray schedules nothing new there.")
    if not kill:
        out.text("Not killed (--no-kill): stop the node after the deadline (SIGKILL its "
                 "raylet) for Ray to report its actors as preempted.")
        return out.exit_code
    time.sleep(deadline_s + 0.5)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        out.text(f"Killed raylet pid {pid} of node {node_id}: Ray declares the node dead "
                 "once its health checks fail, its actors as preempted.")
    return out.exit_code
