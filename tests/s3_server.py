"""A real S3 API on 127.0.0.1 for the tests: ``moto`` in server mode, in its own process group.

Started on a free port as a subprocess (its own session, so the fixture can kill it and
anything it spawned by process group), waited for until it answers, and killed by pid/pgid
at teardown. Clients reach it through the standard AWS variables (``AWS_ENDPOINT_URL``, which
pyarrow's ``S3FileSystem`` and so Ray's ``s3://`` storage honour, and test credentials).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class S3Server:
    """A running S3-compatible server."""

    endpoint: str
    pid: int

    @property
    def env(self) -> dict[str, str]:
        """The variables a process needs to use it for ``s3://`` paths."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def filesystem(self) -> Any:
        """A pyarrow S3 filesystem on this server (buckets may be created through it)."""
        import pyarrow.fs

        return pyarrow.fs.S3FileSystem(
            endpoint_override=self.endpoint, access_key="testing", secret_key="testing",
            region="us-east-1", allow_bucket_creation=True, allow_bucket_deletion=True,
        )

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name``; returns ``s3://name``."""
        self.filesystem().create_dir(name)
        return f"s3://{name}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def running_s3_server(log: Path, timeout_s: float = 30.0) -> Iterator[S3Server]:
    """Start moto's server; yields it once it answers; raises ``RuntimeError`` if it cannot."""
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"moto[server] is not installed ({exc}); pip install -e '.[test]'"
        ) from exc
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not _answers(endpoint):
            if proc.poll() is not None:
                raise RuntimeError(f"the S3 server exited with {proc.returncode}: "
                                   f"{log.read_text(errors='replace')[-500:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the S3 server did not answer at {endpoint} in {timeout_s} s")
            time.sleep(0.1)
        yield S3Server(endpoint, proc.pid)
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
