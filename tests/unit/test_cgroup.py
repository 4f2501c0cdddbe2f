"""The cgroup CPU reader on fixture trees: cgroup v2 (production hosts) and v1 (these machines),
limits on an ancestor, hybrid hosts, and the CGROUP_CPU events it emits."""

from __future__ import annotations

from pathlib import Path

import pytest

from gmpmon.capture.cgroup import (
    CgroupCpuReader,
    locate,
    parse_cpu_max,
    parse_cpu_stat,
    parse_mountinfo,
    parse_proc_cgroup,
    read_cpu,
)
from gmpmon.events import U64_MAX, CgroupField, Kind

V2_STAT = """usage_usec 8123456
user_usec 7000000
system_usec 1123456
core_sched.force_idle_usec 0
nr_periods 1200
nr_throttled 340
throttled_usec 5600000
nr_bursts 0
burst_usec 0
"""
V1_STAT = "nr_periods 50\nnr_throttled 20\nthrottled_time 1234567890\nnr_bursts 0\nburst_time 0\n"


def v2_tree(tmp: Path, *, leaf_max: str = "max 100000", parent_max: str = "150000 100000"
            ) -> tuple[Path, str]:
    root = tmp / "sys" / "fs" / "cgroup"
    parent = root / "kubepods.slice"
    leaf = parent / "pod-1.scope"
    leaf.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (parent / "cpu.max").write_text(parent_max + "\n")
    (parent / "cpu.stat").write_text(V2_STAT)
    (leaf / "cpu.max").write_text(leaf_max + "\n")
    (leaf / "cpu.stat").write_text(V2_STAT.replace("nr_throttled 340", "nr_throttled 0"))
    mountinfo = (f"25 30 0:23 / {root} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 "
                 "cgroup2 rw,nsdelegate,memory_recursiveprot\n"
                 "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n")
    return root, mountinfo


def test_parse_proc_cgroup_v1_v2_and_hybrid() -> None:
    assert parse_proc_cgroup("0::/kubepods.slice/pod-1.scope\n") == (
        None, "/kubepods.slice/pod-1.scope")
    hybrid = "4:memory:/x\n1:cpu:/gm-test\n0::/\n"
    assert parse_proc_cgroup(hybrid) == ("/gm-test", "/")
    assert parse_proc_cgroup("3:cpu,cpuacct:/docker/abc\n")[0] == "/docker/abc"
    assert parse_proc_cgroup("garbage\n") == (None, None)


def test_parse_mountinfo_finds_v1_cpu_and_cgroup2() -> None:
    text = ("32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
            "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
            "50 31 0:40 /docker/x /mnt/with\\040space rw - cgroup cgroup rw,cpu,cpuacct\n")
    v1, v2 = parse_mountinfo(text)
    assert v1 == ("/", "/sys/fs/cgroup/cpu")
    assert v2 == ("/", "/sys/fs/cgroup/unified")
    v1b, _ = parse_mountinfo(text.splitlines()[3] + "\n")
    assert v1b == ("/docker/x", "/mnt/with space")


def test_cpu_max_and_stat_parsing() -> None:
    assert parse_cpu_max("max 100000\n") == (-1, 100000)
    assert parse_cpu_max("50000 100000\n") == (50000, 100000)
    assert parse_cpu_max("max\n") == (-1, 100000)
    assert parse_cpu_max("") is None
    st = parse_cpu_stat(V2_STAT)
    assert st["nr_throttled"] == 340 and st["throttled_usec"] == 5600000


def test_v2_limit_on_an_ancestor_applies(tmp_path: Path) -> None:
    root, mountinfo = v2_tree(tmp_path)
    cg = locate("0::/kubepods.slice/pod-1.scope\n", mountinfo)
    assert cg is not None and cg.version == 2
    assert cg.leaf == str(root / "kubepods.slice" / "pod-1.scope")
    r = read_cpu(cg)
    assert r is not None
    # The leaf has no limit ("max"); its parent allows 1.5 CPUs and is the one throttled.
    assert (r.quota_us, r.period_us) == (150000, 100000)
    assert r.path == str(root / "kubepods.slice")
    assert (r.nr_periods, r.nr_throttled, r.throttled_ns) == (1200, 340, 5_600_000_000)
    assert r.usage_ns == 8_123_456_000


def test_v2_tightest_limit_wins(tmp_path: Path) -> None:
    _root, mountinfo = v2_tree(tmp_path, leaf_max="50000 100000")
    cg = locate("0::/kubepods.slice/pod-1.scope\n", mountinfo)
    assert cg is not None
    r = read_cpu(cg)
    assert r is not None and r.quota_us == 50000 and r.nr_throttled == 0  # the leaf's stat


def test_v2_without_any_limit(tmp_path: Path) -> None:
    _root, mountinfo = v2_tree(tmp_path, parent_max="max 100000")
    cg = locate("0::/kubepods.slice/pod-1.scope\n", mountinfo)
    assert cg is not None
    r = read_cpu(cg)
    assert r is not None and r.quota_us == -1 and r.path == cg.leaf


def test_v1_quota_and_hybrid_host_prefers_v1(tmp_path: Path) -> None:
    cpu = tmp_path / "cpu"
    leaf = cpu / "gm-test"
    leaf.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    (leaf / "cpu.cfs_quota_us").write_text("20000\n")
    (leaf / "cpu.cfs_period_us").write_text("100000\n")
    (leaf / "cpu.stat").write_text(V1_STAT)
    (leaf / "cpuacct.usage").write_text("777\n")
    mountinfo = (f"32 31 0:29 / {cpu} rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
                 f"41 31 0:38 / {tmp_path / 'unified'} rw,relatime - cgroup2 cgroup2 rw\n")
    cg = locate("2:cpu,cpuacct:/gm-test\n0::/\n", mountinfo)
    assert cg is not None and cg.version == 1 and cg.dirs == (str(leaf), str(cpu))
    r = read_cpu(cg)
    assert r is not None
    assert (r.quota_us, r.period_us, r.nr_periods, r.nr_throttled, r.throttled_ns,
            r.usage_ns) == (20000, 100000, 50, 20, 1234567890, 777)


def test_reader_emits_all_fields_then_only_changes(tmp_path: Path) -> None:
    root, mountinfo = v2_tree(tmp_path)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "77").mkdir()
    (proc / "self" / "mountinfo").write_text(mountinfo)
    (proc / "77" / "cgroup").write_text("0::/kubepods.slice/pod-1.scope\n")
    rd = CgroupCpuReader(77, proc=str(proc))
    out: list[tuple[int, int, int, int, int, int, int]] = []
    rd.read(1_000, out)
    assert {e[4]: e[5] for e in out} == {
        CgroupField.QUOTA_US: 150000, CgroupField.PERIOD_US: 100000,
        CgroupField.NR_PERIODS: 1200, CgroupField.NR_THROTTLED: 340,
        CgroupField.THROTTLED_NS: 5_600_000_000, CgroupField.USAGE_NS: 8_123_456_000,
        # The leaf's own limit (none: "max"), the only one Go 1.25+ reads.
        CgroupField.LEAF_QUOTA_US: U64_MAX, CgroupField.LEAF_PERIOD_US: 100000}
    assert all(e[1] == Kind.CGROUP_CPU and e[6] == 2 for e in out)
    rd.read(2_000, out)  # too soon: nothing read
    assert len(out) == 8
    (root / "kubepods.slice" / "cpu.stat").write_text(V2_STAT.replace("340", "341"))
    (root / "kubepods.slice" / "cpu.max").write_text("max 100000\n")
    out.clear()
    rd.read(2_000_000_000, out)
    got = {e[4]: e[5] for e in out}
    assert got[CgroupField.QUOTA_US] == U64_MAX
    assert CgroupField.PERIOD_US not in got


def test_reader_sends_the_targets_affinity_from_the_kernel() -> None:
    """The CPUs in the target's sched_getaffinity mask (here: this process's), sent once,
    read from the real /proc."""
    import os
    out: list[tuple[int, int, int, int, int, int, int]] = []
    rd = CgroupCpuReader(os.getpid())
    rd.read(0, out)
    got = [e for e in out if e[4] == CgroupField.AFFINITY_CPUS]
    assert [e[5] for e in got] == [len(os.sched_getaffinity(0))]
    out.clear()
    rd.read(1_000_000_000, out)
    assert not [e for e in out if e[4] == CgroupField.AFFINITY_CPUS]  # unchanged: not sent


def test_reader_without_cgroup_files_emits_nothing(tmp_path: Path) -> None:
    out: list[tuple[int, int, int, int, int, int, int]] = []
    CgroupCpuReader(1, proc=str(tmp_path)).read(0, out)
    assert out == []


# -- where the throttled-CPU tests make their cgroup (tests/integration/test_findings.py) ------

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_the_test_cgroup_goes_where_the_cpu_controller_is(tmp_path: Path) -> None:
    from tests.integration.test_findings import cpu_hierarchy

    assert cpu_hierarchy(HYBRID) == (1, Path("/sys/fs/cgroup/cpu"))
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    unified = f"30 23 0:26 / {tmp_path} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    assert cpu_hierarchy(unified) == (2, tmp_path)
    (tmp_path / "cgroup.controllers").write_text("hugetlb\n")
    with pytest.raises(AssertionError, match="no cgroup CPU controller"):
        cpu_hierarchy(unified)
