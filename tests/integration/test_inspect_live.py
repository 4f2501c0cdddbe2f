"""The probe sites and offsets gmpmon.binary computes, checked on live Go processes with the
kernel's own uprobe tracer (tracefs uprobe_events with register and memory fetchargs): no
BPF program of ours is involved, so this is independent of capture.

Per Go version, on a private copy of the `fanout` workload (a private inode: nobody else's
processes are probed):
- runqsteal's call-result site sees EAX = the n that runqgrab returned at its RET (same
  thread, one-to-one): the `call_results` contract, on every version;
- gopark's entry site fires once per call (vs its first instruction) and sees CL = a valid
  wait reason: the entry-site choice, including Go 1.19's sites past `sub rsp`;
- execute's entry site sees RAX = a runnable g with a goid: DWARF/table offsets, live.

tracefs is mounted in a private mount namespace (unshare), so the machine's mounts are
untouched; the uprobe events are removed afterwards.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from gmpmon.binary import BinaryInfo, load
from gmpmon.binary.elf import PT_LOAD, Elf
from tests import gotargets

pytestmark = pytest.mark.bpf

HELPER = textwrap.dedent(
    """
    import os, subprocess, sys
    events, group, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    T = "/sys/kernel/tracing"
    subprocess.run(["mount", "-t", "tracefs", "nodev", T], check=True)
    inst = f"{T}/instances/{group}"
    names = []

    def append(path, text):
        # not open(path, "a"): Python seeks to the end, which tracefs refuses (EINVAL)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    try:
        with open(events) as f:
            defs = f.read().splitlines()
        for d in defs:
            append(f"{T}/uprobe_events", d + "\\n")
            names.append(d.split()[0].split("/")[1])
        os.mkdir(inst)
        with open(f"{inst}/buffer_size_kb", "w") as f:
            f.write("8192")
        with open(f"{inst}/events/{group}/enable", "w") as f:
            f.write("1")
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, timeout=60)
        with open(f"{inst}/events/{group}/enable", "w") as f:
            f.write("0")
        with open(f"{inst}/trace") as f:
            sys.stdout.write(f.read())
    finally:
        if os.path.isdir(inst):
            with open(f"{inst}/events/{group}/enable", "w") as f:
                f.write("0")
            os.rmdir(inst)
        for n in names:
            append(f"{T}/uprobe_events", f"-:{group}/{n}\\n")
    """
)

LINE = re.compile(r"^\s*\S+-(\d+)\s+\[\d+\]\s+\S+\s+([\d.]+): (\w+): \(0x[0-9a-f]+\)\s*(.*)$")


def file_offset(elf: Elf, addr: int) -> int:
    for s in elf.segments:
        if s.type == PT_LOAD and s.vaddr <= addr < s.vaddr + s.filesz:
            return addr - s.vaddr + s.offset
    raise AssertionError(f"{addr:#x} not in a PT_LOAD segment")


def trace(
    tmp_path: Path, exe: Path, info: BinaryInfo, probes: dict[str, tuple[int, str]], *args: str
) -> list[tuple[int, str, dict[str, int]]]:
    """Run exe with uprobes {name: (vaddr, fetchargs)}; return (tid, name, args) in order."""
    assert shutil.which("unshare"), "unshare(1) missing: util-linux (scripts/setup installs it)"
    elf = Elf(exe.read_bytes(), str(exe))
    group = f"gmpmon_t{abs(hash(str(tmp_path))) % 10**8}"
    defs = [
        f"p:{group}/{name} {exe}:{file_offset(elf, addr):#x} {fetch}".rstrip()
        for name, (addr, fetch) in probes.items()
    ]
    (tmp_path / "events").write_text("\n".join(defs) + "\n")
    (tmp_path / "helper.py").write_text(HELPER)
    r = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            sys.executable,
            str(tmp_path / "helper.py"),
            str(tmp_path / "events"),
            group,
            str(exe),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = []
    for line in r.stdout.splitlines():
        m = LINE.match(line)
        if m:
            fields = dict(kv.split("=", 1) for kv in m.group(4).split())
            out.append((int(m.group(1)), m.group(3), {k: int(v, 0) for k, v in fields.items()}))
    assert "LOST" not in r.stdout
    return out


@pytest.mark.parametrize("version", gotargets.versions())
def test_sites_and_offsets_on_a_live_process(version: str, tmp_path: Path) -> None:
    exe = tmp_path / "fanout"
    shutil.copy2(gotargets.build("fanout", go=version, mode="default"), exe)
    info = load(str(exe))
    o = info.offsets
    steal = info.probe_sites["runtime.runqsteal"].call_results["runtime.runqgrab"]
    probes: dict[str, tuple[int, str]] = {f"site{k}": (a, "n=%ax:u32") for k, a in enumerate(steal)}
    grab = info.probe_sites["runtime.runqgrab"]
    probes |= {f"ret{k}": (a, "n=%ax:u32") for k, a in enumerate(grab.rets)}
    park = info.probe_sites["runtime.gopark"]
    probes["park"] = (park.entry_site, "reason=%cx:u8")
    probes["parkfirst"] = (park.entry, "")
    ex = info.probe_sites["runtime.execute"]
    probes["exec"] = (
        ex.entry_site,
        f"goid=+{o['runtime.g.goid']}(%ax):u64 status=+{o['runtime.g.atomicstatus']}(%ax):u32",
    )
    g_m, m_p = o["runtime.g.m"], o["runtime.m.p"]
    st, goid, wr = o["runtime.g.atomicstatus"], o["runtime.g.goid"], o["runtime.g.waitreason"]
    # at execute, R14 is g0: g0.m.procid is this thread's id, g0.m.p is a running P
    probes["execm"] = (
        ex.entry_site,
        f"procid=+{o['runtime.m.procid']}(+{g_m}(%r14)):u64 "
        f"pstatus=+{o['runtime.p.status']}(+{m_p}(+{g_m}(%r14))):u32 "
        f"pid=+{o['runtime.p.id']}(+{m_p}(+{g_m}(%r14))):s32",
    )
    probes["ready"] = (
        info.probe_sites["runtime.ready"].entry_site,
        f"status=+{st}(%ax):u32 wr=+{wr}(%ax):u8",
    )
    probes |= {
        f"newg{k}": (a, f"goid=+{goid}(%ax):u64 status=+{st}(%ax):u32")
        for k, a in enumerate(info.probe_sites["runtime.newproc1"].rets)
    }
    probes["exit"] = (
        info.probe_sites["runtime.goexit0"].entry_site,
        f"status=+{st}(%ax):u32 goid=+{goid}(%ax):u64",
    )
    probes["steal"] = (
        info.probe_sites["runtime.runqsteal"].entry_site,
        f"thief=+{o['runtime.p.id']}(%ax):s32 victim=+{o['runtime.p.id']}(%bx):s32",
    )
    events = trace(tmp_path, exe, info, probes, "-k", "32", "-work", "2000000")
    kinds = Counter(name for _t, name, _a in events)

    # runqsteal's call-result site: EAX is what runqgrab's RET just returned, on that thread
    last_ret: dict[int, int] = {}
    pairs = 0
    for tid, name, args in events:
        if name.startswith("ret"):
            last_ret[tid] = args["n"]
        elif name.startswith("site"):
            assert tid in last_ret, "call-result site without a runqgrab return before it"
            assert args["n"] == last_ret.pop(tid)
            pairs += 1
    assert pairs > 0, kinds
    assert all(0 <= a["n"] <= 129 for _t, n, a in events if n.startswith("site"))

    # gopark: the entry site fires once per call (the first instruction also on restarts)
    assert kinds["park"] > 0
    assert kinds["park"] <= kinds["parkfirst"] <= kinds["park"] + max(2, kinds["park"] // 20)
    reasons = Counter(info.wait_reasons[a["reason"]] for _t, n, a in events if n == "park")
    assert all(r for r in reasons), reasons
    assert set(reasons) & {"semacquire", "sync.WaitGroup.Wait", "sync.Mutex.Lock"}, reasons

    # execute(gp): RAX is a runnable g with a goid (the g offsets, live)
    runnable = info.g_status.index("runnable")
    execs = [a for _t, n, a in events if n == "exec"]
    assert execs
    assert all(a["status"] & ~0x1000 == runnable for a in execs), Counter(
        a["status"] for a in execs
    )
    assert all(a["goid"] > 0 for a in execs)
    assert len({a["goid"] for a in execs}) >= 16  # the 32 spawned goroutines, mostly

    # the M and P behind g0 (g.m, m.procid, m.p, p.status, p.id offsets)
    running_p = info.p_status.index("running")
    execm = [(t, a) for t, n, a in events if n == "execm"]
    assert execm and all(a["procid"] == tid for tid, a in execm)
    assert all(a["pstatus"] == running_p for _t, a in execm)
    nprocs = len({a["pid"] for _t, a in execm})
    assert all(0 <= a["pid"] < 1024 for _t, a in execm) and nprocs >= 2

    # ready(gp): a waiting g with a wait reason; newproc1 returns a runnable g with a goid;
    # goexit0(gp): the g is still running; runqsteal(thief, victim): two distinct Ps
    waiting = info.g_status.index("waiting")
    readies = [a for _t, n, a in events if n == "ready"]
    assert readies and all(a["status"] & ~0x1000 == waiting for a in readies)
    assert all(info.wait_reasons[a["wr"]] for a in readies)
    newgs = [a for _t, n, a in events if n.startswith("newg")]
    assert len(newgs) >= 32 and all(a["goid"] > 0 for a in newgs)
    assert all(a["status"] & ~0x1000 == runnable for a in newgs)
    exits = [a for _t, n, a in events if n == "exit"]
    assert len(exits) >= 16
    assert all(a["status"] & ~0x1000 == info.g_status.index("running") for a in exits)
    steals = [a for _t, n, a in events if n == "steal"]
    assert steals and all(a["thief"] != a["victim"] for a in steals)


def test_parser_reads_tracefs_lines() -> None:
    line = "  fanout-16044   [001] DBZff  3376.922117: ret2: (0x4569f6) n=1 x=0x10"
    m = LINE.match(line)
    assert m and m.group(1) == "16044" and m.group(3) == "ret2" and m.group(4) == "n=1 x=0x10"
