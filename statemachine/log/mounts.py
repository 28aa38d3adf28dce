"""Which filesystem a path is on, from the mount table; whether SQLite is safe there.

SQLite's locking relies on POSIX advisory locks (and, in WAL mode, on shared memory) that
network and FUSE filesystems implement partly or not at all: two writers, or a stale lock
after a client died, can corrupt a database there. This module reads Linux's mount table
(``/proc/self/mountinfo``, else ``/proc/mounts``) and finds the mount a path is on, so that a
log about to be created on NFS, SMB, a FUSE mount or a cluster filesystem can be warned about.
The parsers take the table's text, so they can be fed any table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
MOUNTS = Path("/proc/mounts")

#: Filesystem types on which SQLite's file locking is not reliable (network and cluster
#: filesystems); any ``fuse.*`` type is one too, except those listed in :data:`LOCAL_FUSE`.
NETWORK_TYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "9p", "afs", "ceph", "glusterfs",
    "lustre", "gpfs", "beegfs", "orangefs", "pvfs2", "ocfs2", "gfs2", "davfs", "fuse",
})
#: FUSE filesystems that are local overlays (a rootless container's root), not network ones.
LOCAL_FUSE = frozenset({"fuse.fuse-overlayfs"})


@dataclass(frozen=True)
class Mount:
    """One line of the mount table."""

    mount_point: str
    fstype: str
    source: str

    @property
    def is_network(self) -> bool:
        """Whether SQLite's locking is unreliable on this filesystem (network or FUSE)."""
        return is_network_type(self.fstype)


def is_network_type(fstype: str) -> bool:
    """Whether ``fstype`` is a network, cluster or FUSE filesystem type."""
    kind = fstype.lower()
    if kind in LOCAL_FUSE:
        return False
    return kind in NETWORK_TYPES or kind.startswith("fuse.")


def _unescape(field: str) -> str:
    r"""A mount table field with the kernel's octal escapes (``\040`` for a space) decoded."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        chunk = field[i + 1 : i + 4]
        if field[i] == "\\" and len(chunk) == 3 and all(c in "01234567" for c in chunk):
            out.append(chr(int(chunk, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/<pid>/mountinfo`` table, in order (malformed lines skipped).

    A line is ``ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - TYPE SOURCE ...``.
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if dash < 5 or len(fields) < dash + 3:
            continue
        mounts.append(Mount(_unescape(fields[4]), fields[dash + 1], _unescape(fields[dash + 2])))
    return mounts


def parse_mounts(text: str) -> list[Mount]:
    """The mounts of a ``/proc/mounts`` (``fstab``-like) table, in order."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#"):
            mounts.append(Mount(_unescape(fields[1]), fields[2], _unescape(fields[0])))
    return mounts


def read_mount_table() -> list[Mount]:
    """This process's mounts (empty when no table can be read: not Linux)."""
    for path, parse in ((MOUNTINFO, parse_mountinfo), (MOUNTS, parse_mounts)):
        try:
            return parse(path.read_text(encoding="utf-8", errors="surrogateescape"))
        except OSError:
            continue
    return []


def _existing_real_path(path: Path) -> str:
    """``path`` resolved through symlinks, from its nearest existing ancestor."""
    path = Path(os.path.abspath(path))
    missing: list[str] = []
    while not path.exists() and path != path.parent:
        missing.append(path.name)
        path = path.parent
    resolved = Path(os.path.realpath(path))
    for name in reversed(missing):
        resolved = resolved / name
    return str(resolved)


def mount_of(path: str | Path, mounts: list[Mount]) -> Mount | None:
    """The mount ``path`` is on: the longest mount point containing it (the last one mounted
    there when several are); ``None`` when no mount contains it."""
    target = _existing_real_path(Path(path))
    best: Mount | None = None
    for mount in mounts:
        point = mount.mount_point.rstrip("/") or "/"
        inside = target == point or target.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = mount
    return best


def network_mount(path: str | Path, mounts: list[Mount] | None = None) -> Mount | None:
    """The network or FUSE mount ``path`` is on, or ``None`` when it is on a local one."""
    found = mount_of(path, read_mount_table() if mounts is None else mounts)
    return found if found is not None and found.is_network else None
