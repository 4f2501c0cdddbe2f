"""The kernel sources on real Go programs: perf-event samples and raw tracepoints.

Each source runs alone here (its own BPF object, as `gmpmon` would load it with only that
source), on a workload that says what it did: the cpuprof spinners log which P they ran on
and when (runtime.procPin, runtime.nanotime); the syscall workload counts its nanosleeps;
the kernel's own /proc/PID/task/TID/schedstat is the oracle for M on-CPU time and run-queue
delay.
"""

from __future__ import annotations

import bisect
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gmpmon.events import (
    SAMPLE_G0,
    SAMPLE_GO,
    SAMPLE_KERNEL,
    SAMPLE_NOT_GO,
    STACK_ID_BASE,
    EventTuple,
    Kind,
)
from gmpmon.events import Counter as Ctr
from tests.gotargets import build

VERSIONS = ("1.19", "1.27")  # the oldest (no push rbp, m.oldp in syscalls) and the newest


def start(tmp_path: Path, name: str, go: str, *args: str) -> tuple[subprocess.Popen[str], Any]:
    """A private copy of workload `name`, started and held at its gate (-wait-stdin)."""
    exe = tmp_path / name
    shutil.copy(build(name, go), exe)
    p = subprocess.Popen([str(exe), *args, "-wait-stdin"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    from gmpmon.binary import load_pid

    return p, load_pid(p.pid)


def go_on(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None
    p.stdin.write("\n")
    p.stdin.flush()


def spinner_logs(out: str) -> dict[int, tuple[list[int], list[int]]]:
    """goid -> (timestamps, P ids) of the P changes each spinner logged."""
    logs = {}
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "spinner":
            pairs = [tuple(map(int, x.split(":"))) for x in f[2:]]
            logs[int(f[1])] = ([t for t, _ in pairs], [p for _, p in pairs])
    return logs


def sample_cpuprof(tmp_path: Path, go: str, info_edit: Any = None) -> tuple[
        list[EventTuple], dict[int, tuple[str, ...]], str, Any, list[EventTuple]]:
    from gmpmon.capture.perfsample import PerfSampler

    p, info = start(tmp_path, "cpuprof", go, "-t", "1500ms", "-garbage")
    if info_edit is not None:
        info = info_edit(info)
    s = PerfSampler(info, p.pid, hz=999)  # the per-sample checks want volume: 1.5 s at 999 Hz
    try:
        s.start()
        go_on(p)
        events: list[EventTuple] = []
        counters: list[EventTuple] = []
        stacks: dict[int, tuple[str, ...]] = {}
        n = 0
        while True:
            done = p.poll() is not None
            new: dict[int, tuple[str, ...]] = {}  # as each Batch gets them
            s.poll(events, new)
            assert not new.keys() & stacks.keys(), "a stack id defined twice"
            stacks.update(new)
            if done:
                break
            n += 1
            if n % 10 == 0:
                s.read_counters(time.monotonic_ns(), counters)
            time.sleep(0.01)
        s.read_counters(time.monotonic_ns(), counters)
        raw_reads_equal_bccs(s.bpf)
    finally:
        s.close()
        if p.poll() is None:
            p.kill()
    assert p.stdout is not None
    return events, stacks, p.stdout.read(), s, counters


def raw_reads_equal_bccs(bpf: Any) -> None:
    """The raw bpf(2) readers (gmpmon/capture/bpfsys.py) answer what BCC's own table access
    does, on a sampler's maps once its target has exited: every stack of `stacks`, the
    `counters` hash (in the same order) and the per-CPU loss arrays."""
    import ctypes as ct

    from gmpmon._bcc import scalar_items
    from gmpmon.capture.bpfsys import PerCpuU64Array, StackMap, U64Hash

    table = bpf[b"stacks"]
    smap = StackMap(table.map_fd, ct.sizeof(table.Leaf))
    kids = [k.value for k in table]
    assert kids
    for kid in kids:
        assert smap.pcs(kid) == [int(a) for a in table.walk(kid)]
    assert smap.pcs(next(i for i in range(1 << 20) if i not in set(kids))) == []
    assert U64Hash(bpf[b"counters"].map_fd).items() == scalar_items(bpf[b"counters"])
    for name in (b"lost", b"ctr_full"):
        arr = PerCpuU64Array(bpf[name].map_fd)
        assert arr.totals(1) == [arr.total(0)] == [int(sum(bpf[name][ct.c_int(0)]))]


@pytest.mark.bpf
@pytest.mark.parametrize("go", VERSIONS)
def test_samples_see_each_spinner_on_the_p_it_logged(tmp_path: Path, go: str) -> None:
    events, stacks, out, s, _ = sample_cpuprof(tmp_path, go)
    assert not s.off_reason
    logs = spinner_logs(out)
    assert len(logs) == 3
    in_spin = [e for e in events if "main.spin" in stacks.get(e[5] >> 32, ())]
    go_samples = [e for e in in_spin if e[5] & 0xFF == SAMPLE_GO]
    assert len(go_samples) >= 300, (
        Counter(e[5] & 0xFF for e in events),
        Counter(stacks.get(e[5] >> 32, ("no stack",))[-3:] for e in events).most_common(5),
        {g: len(t) for g, (t, _) in logs.items()})
    right = wrong = 0
    for ts, _k, p, _m, goid, _a0, _a1 in go_samples:
        assert goid in logs, f"sample in main.spin names goroutine {goid}, not a spinner"
        times, ps = logs[goid]
        i = bisect.bisect_right(times, ts) - 1
        near = min(abs(ts - t) for t in times) < 2_000_000
        if i < 0 or near:
            continue  # before its first log line, or within 2 ms of a P change
        if ps[i] == p:
            right += 1
        else:
            wrong += 1
    assert right >= 200 and wrong <= right // 50, (right, wrong)
    # The frameless leaf's caller is restored: burn is called from spin.
    burn = [stacks[e[5] >> 32] for e in go_samples if stacks[e[5] >> 32][-1] == "main.burn"]
    assert burn and all(st[-2] == "main.spin" for st in burn)
    # One stack id per distinct stack (the word at [RSP] varies from sample to sample: it
    # once made a new id for most samples), and every sample's id is defined.
    assert len(set(stacks.values())) == len(stacks)
    assert all(e[5] >> 32 in stacks or e[5] >> 32 == 0 for e in events)


def garbage_span(info: Any) -> tuple[int, int]:
    """[first, last] pc (run-time addresses) at which main.garbageLoop's R14 is the garbage:
    from the instruction after `mov r14, rax` to `mov r14, rdx` (not yet executed), by
    disassembling the ABI0 body (garbage_amd64.s)."""
    import capstone

    from gmpmon.capture.sites import BinaryText

    ft = info.functab
    for start, end, name in zip(ft.starts, ft.ends, ft.names, strict=True):
        if not name.startswith("main.garbageLoop"):
            continue
        bt = BinaryText(info.path)
        off = bt.file_offset(start)
        assert off is not None
        with open(info.path, "rb") as f:
            f.seek(off)
            code = f.read(end - start)
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        ins = [(i.address, i.size, i.mnemonic, i.op_str) for i in md.disasm(code, start)]
        set_at = [a + n for a, n, m, o in ins if m == "mov" and o == "r14, rax"]
        put_back = [a for a, _n, m, o in ins if m == "mov" and o == "r14, rdx"]
        if set_at and put_back:
            return set_at[0] + info.load_bias, put_back[0] + info.load_bias
    raise AssertionError("no main.garbageLoop with mov r14, rax ... mov r14, rdx")


@pytest.mark.bpf
@pytest.mark.parametrize("go", VERSIONS)
def test_samples_with_garbage_r14_are_not_in_go(tmp_path: Path, go: str) -> None:
    """main.garbageLoop runs with R14 = a non-canonical address or a forged g (m.curg ==
    m.g0 == g; only m.procid != tid gives it away): none of its samples names a G or P."""
    events, stacks, out, s, _ = sample_cpuprof(tmp_path, go)
    assert int(out.split("garbage ")[1].split()[0]) > 10
    # Only between its `mov r14, rax` and its `mov r14, rdx` does R14 hold the garbage: its
    # first and last instructions (and the ABI wrapper, also main.garbageLoop) run with the
    # real g, and a sample there rightly names it (a CI run once had one).
    lo, hi = garbage_span(s.info)
    leaf = [e for e in events if stacks.get(e[5] >> 32, ("",))[-1].startswith("main.garbageLoop")]
    user = [e for e in leaf if e[5] & 0xFF != SAMPLE_KERNEL and lo <= e[6] <= hi]
    assert len(user) >= 10, (len(leaf), [hex(e[6]) for e in leaf[:5]], hex(lo), hex(hi))
    bad = [e for e in user if not (e[5] & 0xFF == SAMPLE_NOT_GO and e[2] == -1 and e[4] == 0)]
    assert not bad, [(e[5] & 0xFF, e[2], e[4], hex(e[6])) for e in bad]
    # ... while everything that validated names a goroutine of the program, on a real P.
    good = [e for e in events if e[5] & 0xFF in (SAMPLE_GO, SAMPLE_G0)]
    # An M may hold no P (sysmon and stopm on g0; a goroutine entering a syscall on Go <=
    # 1.25, where entersyscall has cleared m.p): then it says so, -1, never a made-up P.
    assert good and all(-1 <= e[2] < 2 for e in good)
    users = [e for e in good if e[5] & 0xFF == SAMPLE_GO]
    assert sum(e[2] >= 0 for e in users) >= 0.99 * len(users)
    assert all(e[5] >> 32 >= STACK_ID_BASE for e in events if e[5] >> 32)


@pytest.mark.bpf
def test_sampler_with_wrong_offsets_turns_off_with_one_line(tmp_path: Path) -> None:
    """g.m read at the wrong offset: R14 never validates, the sampler stops and says so in
    one line; the model then reports no sample-derived number at all."""
    import dataclasses

    from gmpmon.events import Batch
    from gmpmon.model import Model
    from gmpmon.session import make_header  # noqa: F401 (the header shape used live)

    def wrong(info: Any) -> Any:
        off = dict(info.offsets)
        off["runtime.g.m"] += 8
        return dataclasses.replace(info, offsets=off)

    events, stacks, _out, s, counters = sample_cpuprof(tmp_path, "1.27", wrong)
    assert s.off_reason.startswith("perf samples off:") and "\n" not in s.off_reason
    off = [e for e in counters if e[1] == Kind.SAMPLER_OFF]
    assert len(off) == 1 and off[0][5] < off[0][6] // 100
    # Nothing after the verdict (the perf events are detached), and the model drops the rest.
    assert all(e[0] < off[0][0] for e in events)
    from tests.unit.test_kernel_model import header

    m = Model(header())
    m.feed(Batch(sorted(events + counters), stacks))
    m.flush()
    k = m.snapshot().kernel
    assert k is not None and k.samples.off == s.off_reason
    assert not k.profile and not k.cpu_by_goroutine and not k.long_running and not k.timeline


def schedstat(pid: int) -> dict[int, tuple[int, int]]:
    """tid -> (on-CPU ns, run-queue wait ns) from the kernel's own accounting."""
    out = {}
    for d in Path(f"/proc/{pid}/task").iterdir():
        with open(d / "schedstat") as f:
            on, wait, _ = map(int, f.read().split())
        out[int(d.name)] = (on, wait)
    return out


@pytest.mark.bpf
def test_sched_tracepoints_match_the_kernels_schedstat(tmp_path: Path) -> None:
    """Per M: on-CPU time and run-queue delay from sched_switch/sched_wakeup against
    /proc/PID/task/TID/schedstat over the same interval (3 spinners on 2 Ps, so the Ms
    contend for the 2 CPUs with each other and with everything else on the machine)."""
    from gmpmon.capture.tracepoints import Tracepoints

    p, info = start(tmp_path, "cpuprof", "1.27", "-t", "1500ms", "-hold")
    t = Tracepoints(info, p.pid)
    try:
        t.start(("sched",))
        before = schedstat(p.pid)
        go_on(p)
        assert p.stdout is not None
        while not p.stdout.readline().startswith("garbage"):
            pass
        after = schedstat(p.pid)
        time.sleep(0.05)
        out: list[EventTuple] = []
        t.read_counters(0, out)
    finally:
        t.close()
        go_on(p)
        p.wait(timeout=30)
    on: Counter[int] = Counter()
    runq: Counter[int] = Counter()
    for e in out:
        if e[1] == Kind.COUNTER and e[4] == Ctr.M_ONCPU_NS:
            on[e[5]] += e[6]
        if e[1] == Kind.COUNTER and e[4] == Ctr.M_RUNQ_NS:
            runq[e[5]] += e[6]
    oracle_on = sum(a[0] - before.get(tid, (0, 0))[0] for tid, a in after.items())
    oracle_wait = sum(a[1] - before.get(tid, (0, 0))[1] for tid, a in after.items())
    ours_on = sum(on.values())
    assert oracle_on > 200_000_000  # up to 3 s of CPU: 1.5 s x 2 busy CPUs on an idle box
    # The counters were read a little after `after`: the Ms ran a little more meanwhile.
    assert 0.95 * oracle_on <= ours_on <= 1.05 * oracle_on + 20_000_000, (ours_on, oracle_on)
    busiest = max(after, key=lambda tid: after[tid][0] - before.get(tid, (0, 0))[0])
    b_on = after[busiest][0] - before.get(busiest, (0, 0))[0]
    assert abs(on[busiest] - b_on) <= 0.05 * b_on + 5_000_000
    # Run-queue delay: each M's first wait after attaching is not seen (not known yet).
    ours_wait = sum(runq.values())
    assert 0.7 * oracle_wait - 20_000_000 <= ours_wait <= 1.05 * oracle_wait + 20_000_000, (
        ours_wait, oracle_wait)


@pytest.mark.bpf
def test_sched_totals_of_threads_that_exit_are_counted_once(tmp_path: Path) -> None:
    """Threads that exit mid-capture (goroutines that return still locked to their thread):
    their final totals come from the `dead` table, read while the target runs and after it
    has gone. The oracle is the kernel's CPU time of the whole process (rusage from wait4,
    dead threads included) less what it had used before the tracepoints went on."""
    import os

    from gmpmon.capture.tracepoints import Tracepoints

    exits = 40
    p, info = start(tmp_path, "lockedthread", "1.27", "-t", "200ms", "-exits", str(exits))
    t = Tracepoints(info, p.pid)
    out: list[EventTuple] = []
    status = None
    try:
        t.start(("sched",))
        before = sum(on for on, _ in schedstat(p.pid).values())
        go_on(p)
        deadline = time.monotonic() + 30
        while status is None and time.monotonic() < deadline:
            time.sleep(0.05)
            t.read_counters(0, out)  # drains `dead` while threads are still exiting
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                status = (st, ru)
        assert status is not None, "lockedthread did not end"
        p.returncode = os.waitstatus_to_exitcode(status[0])
        t.read_counters(0, out)
    finally:
        t.close()
        if status is None:
            go_on(p)
            p.wait(timeout=30)
    assert p.returncode == 0
    ru = status[1]
    oracle = round((ru.ru_utime + ru.ru_stime) * 1e9) - before
    on: Counter[int] = Counter()
    for e in out:
        if e[1] == Kind.COUNTER and e[4] == Ctr.M_ONCPU_NS:
            on[e[5]] += e[6]
    assert len(on) >= exits // 2, f"{len(on)} threads seen, {exits} exited"
    assert exits * 5_000_000 <= oracle  # each exiting thread spun 5 ms
    assert 0.95 * oracle - 10_000_000 <= sum(on.values()) <= 1.05 * oracle + 10_000_000, (
        sum(on.values()), oracle)


@pytest.mark.bpf
@pytest.mark.parametrize("go", VERSIONS)
def test_syscall_tracepoints_count_every_blocking_nanosleep(tmp_path: Path, go: str) -> None:
    """The workload's one goroutine makes N nanosleep(1 ms): sys_enter/exit see >= N, all
    of them from one goroutine, on a P (m.p, or m.oldp once entersyscall released it), each
    lasting >= 1 ms."""
    from gmpmon.capture.tracepoints import Tracepoints
    from gmpmon.syscalls import NAMES

    n = 200
    p, info = start(tmp_path, "syscall", go, "-n", str(n))
    t = Tracepoints(info, p.pid)
    try:
        t.start(("syscalls",))
        go_on(p)
        assert p.stdout is not None
        assert p.stdout.readline().split() == ["syscalls", str(n)]
        p.wait(timeout=30)
        out: list[EventTuple] = []
        t.read_counters(0, out)
    finally:
        t.close()
        if p.poll() is None:
            p.kill()
    nanosleep = next(nr for nr, name in NAMES.items() if name == "nanosleep")
    by_p: Counter[int] = Counter()
    ns_by_p: Counter[int] = Counter()
    per_g: Counter[int] = Counter()
    for e in out:
        if e[1] != Kind.COUNTER:
            continue
        if e[4] == Ctr.SYS_COUNT and e[5] & 0x3FF == nanosleep:
            by_p[e[2]] += e[6]
        if e[4] == Ctr.SYS_NS and e[5] & 0x3FF == nanosleep:
            ns_by_p[e[2]] += e[6]
        if e[4] == Ctr.SYS_G_COUNT and e[5]:
            per_g[e[5]] += e[6]
    with_p = sum(v for k, v in by_p.items() if k >= 0)
    assert with_p >= n, by_p  # the workload's; sysmon's usleep (no P) comes on top
    assert all(0 <= k < 2 for k in by_p if k >= 0)
    assert sum(v for k, v in ns_by_p.items() if k >= 0) >= n * 1_000_000
    goid, count = per_g.most_common(1)[0]
    assert count >= n and goid > 1


@pytest.mark.bpf
@pytest.mark.parametrize("build_mode", ["default", "pie"])
def test_gmpmon_run_with_every_kernel_source_end_to_end(tmp_path: Path, build_mode: str) -> None:
    """The CLI path: `gmpmon run --kernel samples,sched,syscalls` -> summary JSON `kernel`
    blocks, each with its source; the recording exports as a CPU profile naming the
    spinners' goroutines. A PIE's load bias is known only after its exec, while the program
    already runs: every sample was once "[unknown 0x...]" under `run`."""
    import json

    from tests.integration.test_capture import gm_run

    exe = tmp_path / "cpuprof"
    shutil.copy(build("cpuprof", "1.27", build_mode), exe)
    rec = tmp_path / "k.gmp"
    p, s = gm_run(tmp_path, exe, "-t", "1500ms", mode="sample",
                  options=("--kernel", "samples,sched,syscalls", "--record", str(rec)))
    logs = spinner_logs(p.stdout)
    k = s["kernel"]
    assert k["samples"]["source"] == "samples" and k["samples"]["go"] > 100
    assert k["samples"]["period_ns"] == 1_000_000_000 // 99  # the default --sample-hz
    assert not k["samples"]["off"] and "perf samples off" not in p.stderr
    assert {g["goid"] for g in k["cpu_by_goroutine"]["top"][:3]} == set(logs)
    assert {g["function"] for g in k["cpu_by_goroutine"]["top"][:3]} == {"main.burn"}
    assert k["threads"]["source"] == k["runq_latency_ns"]["source"] == "tracepoints"
    assert sum(t["oncpu_ns"] for t in k["threads"]["ms"]) > 100_000_000
    assert k["syscalls"]["source"] == "tracepoints" and k["syscalls"]["count"] > 0
    assert all(r["duration_ns"] >= 10_000_000 and r["goid"] in logs
               for r in k["long_running"]["top"])
    out = tmp_path / "cpu.pb.gz"
    e = subprocess.run([sys.executable, "-m", "gmpmon", "export", str(rec), "--format", "pprof",
                        "--what", "cpu", "-o", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert e.returncode == 0, e.stderr
    from tests.unit.test_export import pprof  # go tool pprof, installed on first use

    tags = pprof(out, "-tags")
    assert logs and all(f": {g}\n" in tags for g in logs)
    json.dumps(k)
