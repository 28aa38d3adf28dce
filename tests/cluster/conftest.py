"""A real multi-node Ray cluster on this machine: a head and worker raylets, 1 CPU each.

``local_cluster`` starts ``ray.cluster_utils.Cluster`` in a private ``RAY_TMPDIR`` (so no
other Ray on the machine can find or join it, nor it them), names each worker node by a
``sm-test/name`` label (plus any labels a test gives, e.g. ``sm-test/disk: bad``) and a
resource of the same name, and connects this process as the driver on the head. The head
has no CPU: trials run on the workers only. Teardown always runs, whatever the test did:
``ray.shutdown()``, ``Cluster.shutdown()`` in a ``finally``, then it checks that no process
it started (found by the private folder in its command line, and their children) survives;
a survivor is killed by its pid and fails the test. Never ``ray stop``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def worker_pythonpath() -> str:
    """PYTHONPATH that lets Ray workers import the package and the cluster trainables."""
    parts = [str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


@dataclass
class LocalCluster:
    """The running cluster: its nodes by name, and how to add or remove one."""

    cluster: Any
    tmp: Path
    nodes: dict[str, Any] = field(default_factory=dict)
    blockers: list[Any] = field(default_factory=list)

    @property
    def address(self) -> str:
        """The GCS address a driver connects to."""
        return str(self.cluster.address)

    def add(self, name: str, **labels: str) -> Any:
        """A worker node with 1 CPU, labelled ``sm-test/name: name`` (and ``labels``)."""
        node = self.cluster.add_node(
            num_cpus=1, resources={name: 1},
            labels={"sm-test/name": name, **{f"sm-test/{k}": v for k, v in labels.items()}},
        )
        self.nodes[name] = node
        return node

    def node_id(self, name: str) -> str:
        """The Ray node id of worker ``name``."""
        return str(self.nodes[name].node_id)

    def name_of(self, node_id: str | None) -> str | None:
        """The worker name of a node id."""
        return next((n for n, node in self.nodes.items() if node.node_id == node_id), None)

    def remove(self, name: str) -> None:
        """Remove worker ``name`` (its raylet and workers are killed, as a lost node)."""
        self.cluster.remove_node(self.nodes.pop(name), allow_graceful=False)

    def block(self, name: str) -> Any:
        """Occupy worker ``name``'s CPU with an idle actor (a busy node); returns it."""
        import ray

        @ray.remote(num_cpus=1, resources={name: 0.001})
        class Blocker:
            def ready(self) -> bool:
                return True

        blocker = Blocker.remote()  # type: ignore[attr-defined]
        ray.get(blocker.ready.remote(), timeout=60)
        self.blockers.append(blocker)
        return blocker

    def unblock(self, blocker: Any) -> None:
        """Free the node a blocker occupies."""
        import ray

        ray.kill(blocker)


def _processes() -> dict[int, tuple[int, str, str]]:
    """Every process: pid -> (parent pid, state letter, command line), from /proc."""
    table: dict[int, tuple[int, str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                "utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        table[int(entry.name)] = (int(fields[1]), fields[0], cmdline)
    return table


def _our_processes(tmp: Path) -> set[int]:
    """Processes started for this cluster: the private folder in their command line, and
    every descendant of those (the raylets' workers)."""
    table = _processes()
    found = {pid for pid, (_, _, cmd) in table.items() if str(tmp) in cmd}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _, _) in table.items() if ppid in found} - found
        found |= children
        grew = bool(children)
    found.discard(os.getpid())
    return found


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie has ended)."""
    table = _processes()
    return {pid for pid in pids if pid in table and table[pid][1] != "Z"}


@contextlib.contextmanager
def local_cluster(workers: dict[str, dict[str, str]]) -> Iterator[LocalCluster]:
    """Start a head (0 CPUs) and ``workers`` (name -> extra labels); always torn down."""
    import ray
    from ray.cluster_utils import Cluster

    tmp = Path(tempfile.mkdtemp(prefix="sm-cluster-", dir="/tmp"))  # short: socket paths
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "PYTHONPATH")}
    os.environ["RAY_TMPDIR"] = str(tmp)
    os.environ["PYTHONPATH"] = worker_pythonpath()
    handle: LocalCluster | None = None
    seen: set[int] = set()
    try:
        # A lost raylet is declared dead after ~2 s instead of Ray's default ~30 s.
        cluster = Cluster(initialize_head=True, connect=False, head_node_args={
            "num_cpus": 0, "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 500,
                               "health_check_failure_threshold": 4},
        })
        handle = LocalCluster(cluster, tmp)
        # The driver connects before the workers exist: Ray 2.40 attaches a driver to any
        # raylet of its IP (a worker's, here), whose removal would break the driver.
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        for name, labels in workers.items():
            handle.add(name, **labels)
        seen = _our_processes(tmp)
        yield handle
    finally:
        seen |= _our_processes(tmp)
        with contextlib.suppress(Exception):
            ray.shutdown()
        if handle is not None:
            try:
                handle.cluster.shutdown()
            except Exception as exc:  # still make sure nothing survives
                print(f"Cluster.shutdown() failed: {exc!r}")
        deadline = time.monotonic() + 20
        survivors = _alive(seen)
        while survivors and time.monotonic() < deadline:
            time.sleep(0.25)
            survivors = _alive(survivors)
        for pid in survivors:  # only processes this fixture started, by pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(tmp, ignore_errors=True)
        if survivors:
            pytest.fail(f"{len(survivors)} cluster process(es) survived Cluster.shutdown() and "
                        f"were killed: {sorted(survivors)}")
