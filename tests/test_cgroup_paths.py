"""Where the host's own cgroup v2 folder lies, under which ``WorkerCgroup.create`` makes
its workers' cgroups (``runner.core.cgroup.unified_folder``), from recorded
``/proc/self/cgroup`` and ``/proc/self/mountinfo`` texts: a hybrid host (v1 controllers
beside a controller-less cgroup2 mount; this CI machine's own lines), a pure cgroup v2
host, a v1-only host, and a mount that shows only part of the hierarchy."""

from __future__ import annotations

from pathlib import Path

from runner.core.cgroup import unified_folder, v1_folder

# a hybrid host (v1 controllers, a controller-less cgroup2 at /sys/fs/cgroup/unified),
# the host process's own lines, as read on the CI machine (2026-12)
HYBRID_CGROUP = "9:name=systemd:/\n2:cpuacct:/\n1:cpu:/\n0::/\n"
HYBRID_MOUNTS = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""

# a pure cgroup v2 host (Ubuntu 22.04 and later): a process in a login session's scope
V2_CGROUP = "0::/user.slice/user-1000.slice/session-3.scope\n"
V2_MOUNTS = """\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
30 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 \
rw,nsdelegate,memory_recursiveprot
"""

# cgroup v1 only, cpu and cpuacct in one hierarchy (CentOS 7, older Ubuntu)
V1_CGROUP = "4:cpu,cpuacct:/user.slice\n3:memory:/user.slice\n1:name=systemd:/user.slice\n"
V1_MOUNTS = """\
25 24 0:21 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:15 - cgroup cgroup rw,cpu,cpuacct
32 25 0:28 / /sys/fs/cgroup/memory rw,nosuid shared:16 - cgroup cgroup rw,memory
"""


def test_a_hybrid_host_makes_its_workers_cgroups_in_the_unified_hierarchy() -> None:
    # the cgroup2 mount, however many v1 ones there are
    assert unified_folder(HYBRID_CGROUP, HYBRID_MOUNTS) == Path("/sys/fs/cgroup/unified")


def test_a_pure_v2_host_finds_its_own_scope() -> None:
    path = Path("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope")
    assert unified_folder(V2_CGROUP, V2_MOUNTS) == path


def test_a_v1_only_host_has_no_unified_folder() -> None:
    assert unified_folder(V1_CGROUP, V1_MOUNTS) is None  # no 0:: line, no cgroup2 mount
    assert unified_folder("0::/\n", V1_MOUNTS) is None  # a 0:: line, no cgroup2 mount


def test_a_mount_of_part_of_the_hierarchy_shows_only_what_lies_under_its_root() -> None:
    # a host that runs in a container sharing the host's cgroup namespace: its mount's
    # root is the container's own cgroup, not the hierarchy's
    mounts = "50 40 0:30 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert unified_folder("0::/docker/abc\n", mounts) == Path("/sys/fs/cgroup")
    assert unified_folder("0::/docker/abc/inner\n", mounts) == Path("/sys/fs/cgroup/inner")
    assert unified_folder("0::/docker/abcdef\n", mounts) is None
    # a second mount that shows the whole hierarchy is used where the first cannot be
    whole = mounts + "51 40 0:30 / /mnt/cgroup2 rw - cgroup2 cgroup2 rw\n"
    assert unified_folder("0::/docker/abcdef\n", whole) == Path("/mnt/cgroup2/docker/abcdef")


def test_a_mount_point_with_a_space_is_unescaped() -> None:
    mounts = r"50 40 0:30 / /mnt/cg\040two rw - cgroup2 cgroup2 rw" + "\n"
    assert unified_folder("0::/a\n", mounts) == Path("/mnt/cg two/a")


def test_a_host_without_any_cgroup_mount_finds_nothing() -> None:
    assert unified_folder(V2_CGROUP, "27 1 254:0 / / rw - ext4 /dev/vda rw\n") is None


# a container's first process on the hybrid CI host (docker 26, cgroupfs driver,
# cgroup version 1), as read from /proc/<pid>/cgroup on the CI machine (2026-12)
CONTAINER = "c0b0cd8fa7ae"
HYBRID_CONTAINER_CGROUP = (
    f"9:name=systemd:/docker/{CONTAINER}\n4:memory:/docker/{CONTAINER}\n"
    f"2:cpuacct:/docker/{CONTAINER}\n1:cpu:/docker/{CONTAINER}\n0::/docker/{CONTAINER}\n"
)


def test_a_container_s_cpuacct_folder_is_found_in_the_v1_hierarchy_naming_it() -> None:
    assert v1_folder(HYBRID_CONTAINER_CGROUP, HYBRID_MOUNTS) == Path(
        f"/sys/fs/cgroup/cpuacct/docker/{CONTAINER}"
    )
    # the unified folder, tried first by ContainerCgroup, lies under the cgroup2 mount
    assert unified_folder(HYBRID_CONTAINER_CGROUP, HYBRID_MOUNTS) == Path(
        f"/sys/fs/cgroup/unified/docker/{CONTAINER}"
    )


def test_a_joint_cpu_cpuacct_hierarchy_is_found_and_a_v2_only_host_has_none() -> None:
    assert v1_folder(V1_CGROUP, V1_MOUNTS) == Path("/sys/fs/cgroup/cpu,cpuacct/user.slice")
    assert v1_folder(V2_CGROUP, V2_MOUNTS) is None
    # a hierarchy whose mount does not name the controller is not taken for it
    assert v1_folder(V1_CGROUP, V1_MOUNTS, controller="pids") is None
