"""Which filesystem a log file is on: real mount tables, parsed for a given path."""

from __future__ import annotations

from pathlib import Path

import pytest

from statemachine.log.mounts import (
    MOUNTINFO,
    mount_of,
    network_mount,
    parse_mountinfo,
    parse_mounts,
    read_mount_table,
)

HERE = Path(__file__).resolve().parent
#: A cluster node's /proc/self/mountinfo: local disks, NFS (v3, v4), SMB, sshfs, gcsfuse,
#: Lustre, CephFS, a 9p share, a local disk mounted inside the NFS share, a FUSE overlay root.
CLUSTER = (HERE.parent / "data" / "mountinfo-cluster.txt").read_text()


@pytest.mark.parametrize(
    ("path", "fstype"),
    [
        ("/home/alice/ray_results/exp/statemachine.db", "ext4"),
        ("/mnt/shared/exp/statemachine.db", "nfs4"),
        ("/mnt/shared", "nfs4"),
        ("/mnt/sharedother/statemachine.db", "ext4"),  # a prefix of the name is not inside
        ("/mnt/shared/scratch/statemachine.db", "xfs"),  # a local disk inside the share
        ("/mnt/team drive/exp/statemachine.db", "cifs"),  # \040 in the table is a space
        ("/home/alice/remote/exp.db", "fuse.sshfs"),
        ("/gcs/runs/exp/statemachine.db", "fuse.gcsfuse"),
        ("/lustre/u/exp/statemachine.db", "lustre"),
        ("/ceph/exp/statemachine.db", "ceph"),
        ("/mnt/wsl/c/exp.db", "9p"),
        ("/data/runs/statemachine.db", "nfs"),
        ("/containers/root/exp.db", "fuse.fuse-overlayfs"),
        ("/var/tmp/statemachine.db", "ext4"),
    ],
)
def test_the_mount_of_a_path_in_a_real_table(path: str, fstype: str) -> None:
    found = mount_of(path, parse_mountinfo(CLUSTER))
    assert found is not None and found.fstype == fstype


def test_network_and_fuse_filesystems_are_told_from_local_ones() -> None:
    mounts = parse_mountinfo(CLUSTER)
    network = {m.fstype for m in mounts if m.is_network}
    assert network == {"nfs4", "nfs", "cifs", "fuse.sshfs", "fuse.gcsfuse", "lustre", "ceph",
                       "9p"}
    assert network_mount("/mnt/shared/x/statemachine.db", mounts) is not None
    assert network_mount("/mnt/shared/scratch/statemachine.db", mounts) is None
    assert network_mount("/containers/root/exp.db", mounts) is None  # a local overlay
    found = network_mount("/mnt/team drive/statemachine.db", mounts)
    assert found is not None and found.source == "//nas.example.com/team"


def test_the_last_mount_on_a_mount_point_wins() -> None:
    table = CLUSTER + "160 22 0:70 / /data rw,relatime shared:90 - ext4 /dev/sdc1 rw\n"
    found = mount_of("/data/runs/statemachine.db", parse_mountinfo(table))
    assert found is not None and found.fstype == "ext4"


def test_the_proc_mounts_format_too() -> None:
    table = (
        "/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n"
        "fileserver:/export/home /home nfs4 rw,relatime,vers=4.2 0 0\n"
        "//nas/team /mnt/team\\040drive cifs rw 0 0\n"
    )
    mounts = parse_mounts(table)
    assert [m.fstype for m in mounts] == ["ext4", "nfs4", "cifs"]
    assert network_mount("/home/bob/ray_results/e/statemachine.db", mounts) is not None
    found = network_mount("/mnt/team drive/x.db", mounts)
    assert found is not None and found.mount_point == "/mnt/team drive"
    assert network_mount("/opt/x.db", mounts) is None


def test_malformed_lines_are_skipped() -> None:
    table = "garbage\n\n1 2 3\n" + CLUSTER.splitlines()[0] + "\n"
    assert [m.fstype for m in parse_mountinfo(table)] == ["ext4"]


@pytest.mark.skipif(not MOUNTINFO.exists(), reason="no /proc/self/mountinfo (not Linux)")
def test_this_machines_temporary_folder_is_not_a_network_filesystem(tmp_path: Path) -> None:
    mounts = read_mount_table()
    assert mounts, "the real mount table parsed to nothing"
    found = mount_of(tmp_path / "statemachine.db", mounts)
    assert found is not None and not found.is_network, found
    assert network_mount(tmp_path / "statemachine.db") is None
