"""Section ``upload``: the default log's copy on S3 storage, and what Tune's loop pays for it.

The storage is a real S3 API on 127.0.0.1 (moto's server, as in the tests; the section says so
and measures pyarrow's local filesystem instead when it cannot start). Logs of 2k, 20k and 200k
events (trials x 20 events, with their snapshots) are uploaded:

- baseline: a plain upload of the same bytes (``open_output_stream`` of the file as it is);
- ours: what ``LogSync`` does per upload: a consistent copy through SQLite's backup API, the
  upload under a temporary name and the move over the old copy.

Tune's loop never does either: it calls ``LogSync.request`` (a lock and a notify) and goes
on. That call is timed while uploads run in the background thread, beside the loop's own cost
of one event (``ExperimentLog.record``, a durable SQLite append) as the baseline.
"""

from __future__ import annotations

import contextlib
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import Context, Stat, interleaved, per_unit
from benchmarks.log import POLICY, running_trial
from statemachine import CheckpointSaved, ExperimentLog
from statemachine.log.remote import RemoteFile
from statemachine.log.sqlite_copy import consistent_copy
from statemachine.tune.log_sync import LogSync

EVENTS_PER_TRIAL = 20
BLOCK_TARGET_US = 100.0  # a request must cost Tune's loop less than this


@contextlib.contextmanager
def _storage(workdir: Path) -> Iterator[tuple[Any, str, str]]:
    """(pyarrow filesystem, bucket path, what it is)."""
    import pyarrow.fs

    from tests.s3_server import running_s3_server

    try:
        with running_s3_server(workdir / "moto.log") as server:
            fs = server.filesystem()
            bucket = f"bench-{uuid.uuid4().hex[:8]}"
            fs.create_dir(bucket)
            yield fs, bucket, f"S3 (moto server on {server.endpoint})"
            return
    except RuntimeError as exc:
        reason = str(exc)
    folder = workdir / "storage"
    folder.mkdir()
    yield pyarrow.fs.LocalFileSystem(), str(folder), f"local filesystem (no S3: {reason})"


def _log(workdir: Path, trials: int) -> Path:
    path = workdir / f"log-{trials}.db"
    log = ExperimentLog.open(path, "bench", POLICY, snapshot_every=100)
    try:
        for t in range(trials):
            running_trial(log, f"t{t}")
            log.record_many([(f"t{t}", CheckpointSaved(f"c{i}"))
                             for i in range(EVENTS_PER_TRIAL - 2)])
    finally:
        log.close()
    return path


def run(ctx: Context) -> None:
    """Measure and print the ``upload`` tables."""
    report = ctx.report
    sizes = [100, 1_000, 10_000] if not ctx.quick else [10, 100]
    scratch = ctx.workdir / "copy.db"
    with _storage(ctx.workdir) as (fs, root, what):
        uploads = report.table("upload", f"One upload of the log to {what}", "ms")
        for trials in sizes:
            local = _log(ctx.workdir, trials)
            mb = local.stat().st_size / 1e6

            target = RemoteFile(fs, f"{root}/exp-{trials}/statemachine.db")

            def plain(local: Path = local, target: RemoteFile = target) -> None:
                with local.open("rb") as src, target.fs.open_output_stream(
                        f"{target.path}.plain") as out:
                    shutil.copyfileobj(src, out, 1 << 20)

            def ours(local: Path = local, target: RemoteFile = target) -> None:
                consistent_copy(local, scratch)
                target.upload(scratch)

            times = interleaved({"plain": plain, "ours": ours}, ctx.rounds)
            base = per_unit(times["plain"], 1, scale=1e3)
            label = f"{trials * EVENTS_PER_TRIAL:,} events ({mb:.1f} MB)"
            uploads.add(f"{label}: plain upload of the file (baseline)", base)
            uploads.add(f"{label}: consistent copy + upload + move (LogSync)",
                        per_unit(times["ours"], 1, scale=1e3), versus=base)
        report.print_table(uploads)
        _blocking(ctx, fs, root, sizes[-1])


def _blocking(ctx: Context, fs: Any, root: str, trials: int) -> None:
    report = ctx.report
    table = report.table("upload", "What Tune's loop pays per event, uploads running or not",
                         "us/event")
    local = ctx.workdir / "live.db"
    shutil.copy(ctx.workdir / f"log-{trials}.db", local)
    log = ExperimentLog.open(local, "bench", POLICY)
    sync = LogSync(local, RemoteFile(fs, f"{root}/live/statemachine.db"))
    sync.prepare()
    running_trial(log, "live")
    calls = ctx.size(1_000, 200)
    n = iter(range(10**9))
    quiet: list[float] = []
    busy: list[float] = []
    requests: list[float] = []
    try:
        for _ in range(ctx.rounds):
            sync.flush(timeout=120)  # no upload running: the loop alone
            start = time.perf_counter()
            for _ in range(calls):
                log.record("live", CheckpointSaved(f"c{next(n)}"))
            quiet.append(time.perf_counter() - start)
            rec = req = 0.0
            for _ in range(calls):  # an upload asked for after every event
                start = time.perf_counter()
                log.record("live", CheckpointSaved(f"c{next(n)}"))
                middle = time.perf_counter()
                sync.request()
                rec += middle - start
                req += time.perf_counter() - middle
            busy.append(rec)
            requests.append(req)
        started = time.perf_counter()
        sync.flush(timeout=120)
        drained = time.perf_counter() - started
    finally:
        log.close()
        sync.close(timeout=120)
    base = per_unit(quiet, calls)
    request = per_unit(requests, calls)
    table.add("ExperimentLog.record, no upload running (baseline)", base)
    table.add("ExperimentLog.record while uploads run (the same machine holds the S3 server)",
              per_unit(busy, calls), versus=base)
    table.add("LogSync.request (returns at once; the upload runs in the background)",
              request, versus=base, target=f"< {BLOCK_TARGET_US:.0f} us",
              ok=request.median < BLOCK_TARGET_US, measured=f"{request.median:.1f} us")
    stats = sync.stats
    table.add("LogSync.request, longest single call", Stat.of([stats.blocked_max_s * 1e6]))
    table.note(
        f"{stats.requests:,} requests became {stats.uploads:,} uploads (coalesced), "
        f"{stats.upload_s / max(stats.uploads, 1) * 1e3:.0f} ms each on average "
        f"(longest {stats.upload_max_s * 1e3:.0f} ms, last copy {stats.last_bytes / 1e6:.1f} MB); "
        f"the last upload finished {drained * 1e3:.0f} ms after the loop stopped"
    )
    report.print_table(table)
