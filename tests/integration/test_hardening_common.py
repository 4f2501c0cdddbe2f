"""Shared by the hardening tests: run gmpmon and Go workloads, measure a target's progress,
and find anything of gmpmon's left in the kernel (uprobes, BPF programs, perf events).

Other engineers may run gmpmon on this machine at the same time, so "left behind" is always
asked about *our* processes: the target we started (uprobes show its /proc/PID/ path or its
executable), the gmpmon processes we started, and gmpmon-named BPF programs that no process
holds any more.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRACEFS_UPROBE_EVENTS = ("/sys/kernel/tracing/uprobe_events",
                         "/sys/kernel/debug/tracing/uprobe_events")
BPF_FD_KINDS = ("anon_inode:bpf-prog", "anon_inode:bpf-map", "anon_inode:[perf_event]",
                "anon_inode:bpf_link", "anon_inode:bpf-link")


def gmpmon_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "gmpmon", *args]


def run_gmpmon(*args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        gmpmon_argv(*args), capture_output=True, text=True, timeout=timeout, cwd=REPO,
        stdin=subprocess.DEVNULL, **kw,
    )


def assert_one_clean_line(r: subprocess.CompletedProcess[str]) -> str:
    """A failure that ends in exactly one `gmpmon: ...` line on stderr and no traceback."""
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"want one stderr line, got {len(lines)}:\n{r.stderr}"
    assert lines[0].startswith("gmpmon: "), lines[0]
    return lines[0]


@dataclass
class Target:
    """A Go workload we started; its stdout lines are collected with their arrival time."""

    proc: subprocess.Popen[str]
    lines: list[tuple[float, str]] = field(default_factory=list)
    _reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_line(self, pred: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, ln in list(self.lines):
                if ln.startswith(pred):
                    return ln
            if self.proc.poll() is not None and self._reader is not None:
                self._reader.join(1)
                for _, ln in self.lines:
                    if ln.startswith(pred):
                        return ln
                raise AssertionError(f"target exited ({self.proc.returncode}) before {pred!r}")
            time.sleep(0.02)
        raise AssertionError(f"no {pred!r} line within {timeout}s: {self.lines[-5:]}")

    def ops_rate(self, seconds: float) -> float:
        """ops/s of a `lifecycle` target over the next `seconds` (its own clock)."""
        return self.rates(seconds)[0]

    def rates(self, seconds: float, pid: int | None = None) -> tuple[float, float]:
        """(ops per wall second, ops per CPU second of the target) of a `lifecycle` target
        over the next `seconds`. Per CPU second does not depend on how busy the (shared)
        machine is, and any probe left in the target shows in it as the target's own time.
        `pid`: the process whose progress lines these are, if not ours (`gmpmon run`)."""
        pid = self.pid if pid is None else pid
        n0 = len(self.lines)
        c0 = cpu_s(pid)
        time.sleep(seconds)
        c1 = cpu_s(pid)
        pts = [p for _, ln in self.lines[n0:] if (p := _ops(ln)) is not None]
        assert len(pts) >= 2, f"too few progress lines: {self.lines[n0:]}"
        (o0, t0), (o1, t1) = pts[0], pts[-1]
        ops = o1 - o0
        return ops / ((t1 - t0) / 1e9), ops * (seconds / ((t1 - t0) / 1e9)) / max(c1 - c0, 0.01)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)


def cpu_s(pid: int) -> float:
    """User+system CPU seconds of a process, all its threads."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ops(line: str) -> tuple[int, int] | None:
    w = line.split()
    if len(w) == 3 and w[0] == "ops":
        return int(w[1]), int(w[2])
    return None


def start_target(exe: Path | str, *args: str, wait_ready: bool = True,
                 env: dict[str, str] | None = None) -> Target:
    proc = subprocess.Popen(
        [str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        stdin=subprocess.DEVNULL, env=dict(os.environ, **(env or {})),
    )
    t = Target(proc)
    t._reader = threading.Thread(target=t._read, daemon=True)
    t._reader.start()
    if wait_ready:
        t.wait_line("ready")
        time.sleep(0.2)  # let the runtime start its Ps
    return t


def start_gmpmon(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        gmpmon_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=REPO, stdin=subprocess.DEVNULL,
    )


def wait_attached(target_pid: int, timeout: float = 60) -> None:
    """Until a uprobe of gmpmon's sits in the target (the compile is done, probes are in)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if uprobes_on(target_pid):
            return
        time.sleep(0.1)
    raise AssertionError(f"gmpmon never attached to {target_pid} within {timeout}s")


# --- what is left in the kernel ----------------------------------------------------------


def _bpftool(*args: str) -> str:
    r = subprocess.run(["bpftool", *args], capture_output=True, text=True, timeout=30)
    return r.stdout


def uprobes_on(target_pid: int, exe: str | None = None,
               holders: Sequence[int] = ()) -> list[str]:
    """gmpmon's uprobes on the target: uprobe_multi links (fdinfo: the binary's real path)
    and per-site perf uprobes (`bpftool perf`: /proc/PID/root/... or the path), by the file
    they are on or by who holds them. Tests give each target a private copy of its binary,
    so a path names this target only."""
    if exe is None:
        try:
            exe = os.path.realpath(f"/proc/{target_pid}/exe")
        except OSError:
            exe = None
    out = []
    for ln in _bpftool("perf").splitlines():
        if "uprobe" not in ln:
            continue
        m = re.match(r"pid (\d+) ", ln)
        held_by = int(m.group(1)) if m else -1
        if (f"/proc/{target_pid}/" in ln or held_by in holders
                or (exe is not None and f"filename {exe} " in ln)):
            out.append(ln)
    for holder, info in uprobe_links():
        if holder in holders or (exe is not None and info.get("path") == exe):
            out.append(f"pid {holder} link {info.get('link_id')} uprobe_multi "
                       f"path {info.get('path')} ({info.get('uprobe_cnt')} uprobes)")
    return out


def uprobe_links() -> list[tuple[int, dict[str, str]]]:
    """(holder pid, fdinfo fields) of every uprobe_multi BPF link open in any process."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fds = os.listdir(d / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(d / "fd" / fd) != "anon_inode:bpf_link":
                    continue
                text = (d / "fdinfo" / fd).read_text()
            except OSError:
                continue
            info = dict(
                (k.strip(), v.strip())
                for k, _, v in (ln.partition(":") for ln in text.splitlines())
                if _ == ":"
            )
            if info.get("link_type") == "uprobe_multi":
                out.append((int(d.name), info))
    return out


def private_copy(exe: Path, tag: str) -> Path:
    """A copy of a workload binary that only this test runs, so that uprobes on its path
    are this test's (other engineers attach to the shared builds at the same time)."""
    from tests.gotargets import BUILD_ROOT

    d = BUILD_ROOT / "hardening"
    d.mkdir(parents=True, exist_ok=True)
    out = d / f"{exe.name}-{tag}-{os.getpid()}"
    if not out.exists():
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_bytes(exe.read_bytes())
        tmp.chmod(0o755)
        tmp.rename(out)
    return out


def fd_links(pid: int) -> dict[str, str]:
    """What each open fd of a process points at. A live process opens and closes fds (gmpmon
    reads /proc while we list), so an fd gone between the listing and its readlink is skipped."""
    out: dict[str, str] = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            out[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
    return out


def bpf_fds(pid: int) -> list[str]:
    """BPF programs, maps, links and perf events a process holds open."""
    out = []
    for fd, link in fd_links(pid).items():
        if link in BPF_FD_KINDS:
            out.append(f"{fd} -> {link}")
    return out


def _held_prog_ids() -> set[int]:
    held: set[int] = set()
    for m in re.finditer(r"prog_id (\d+)", _bpftool("perf")):
        held.add(int(m.group(1)))
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            for fd in os.listdir(d / "fdinfo"):
                try:
                    text = (d / "fdinfo" / fd).read_text()
                except OSError:
                    continue
                pm = re.search(r"^prog_id:\s+(\d+)", text, re.M)
                if pm:
                    held.add(int(pm.group(1)))
        except OSError:
            continue
    return held


def orphan_gmpmon_progs() -> list[str]:
    """gmpmon-named BPF programs still loaded but held by no process (a leak)."""
    for _ in range(20):  # programs are freed a little after their last fd closes
        progs = json.loads(_bpftool("-j", "prog", "show") or "[]")
        ours = {p["id"]: p.get("name", "") for p in progs
                if str(p.get("name", "")).startswith("gmpmon")}
        held = _held_prog_ids()
        # A program loaded after the listing is held by then; one freed since is gone.
        still = {p["id"] for p in json.loads(_bpftool("-j", "prog", "show") or "[]")}
        orphans = [f"{i} {n}" for i, n in ours.items() if i not in held and i in still]
        if not orphans:
            return []
        time.sleep(0.25)
    return orphans


def tracefs_uprobe_events() -> str:
    """The kernel's tracefs uprobe_events. These machines do not mount tracefs: then it is
    mounted for the read in a private mount namespace (unshare -m), so that this check can
    fail wherever it runs instead of being vacuously true."""
    for path in TRACEFS_UPROBE_EVENTS:
        try:
            return Path(path).read_text()
        except OSError:
            continue
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         "d=$(mktemp -d) && mount -t tracefs nodev \"$d\" && cat \"$d/uprobe_events\""],
        capture_output=True, text=True, timeout=30,
    )
    assert r.returncode == 0, f"cannot read tracefs uprobe_events: {r.stderr.strip()}"
    return r.stdout


def tracefs_uprobe_lines(needles: Sequence[str]) -> list[str]:
    """Lines of tracefs uprobe_events mentioning any needle (BCC's tracefs fallback names
    events gmpmon_<gmpmon pid>_<addr>; a path under /proc/PID/root/ names the target)."""
    return [ln for ln in tracefs_uprobe_events().splitlines() if any(n in ln for n in needles)]


def assert_nothing_left(target_pid: int, gmpmon_pids: Sequence[int],
                        exe: str | None = None, settle_s: float = 15) -> None:
    """No uprobe, perf event, BPF program or map of gmpmon's remains for this target
    (waiting up to `settle_s` for the kernel to finish unregistering a dead gmpmon's)."""
    deadline = time.monotonic() + settle_s
    while True:
        left = uprobes_on(target_pid, exe, gmpmon_pids)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == [], "uprobes left behind:\n" + "\n".join(left)
    for pid in gmpmon_pids:
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid), f"gmpmon {pid} still runs"
    assert bpf_fds(target_pid) == [], "the target holds BPF/perf fds"
    needles = [f"gmpmon_{p}_" for p in gmpmon_pids] + [f"/proc/{target_pid}/"]
    assert tracefs_uprobe_lines(needles) == []
    assert orphan_gmpmon_progs() == []


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and not _is_zombie(pid)


def sigkill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def need_bpftool() -> None:
    if not any(Path(d, "bpftool").exists() for d in os.environ.get("PATH", "").split(":")):
        pytest.fail("bpftool is needed to check for leftovers (apt-get install bpftool)")


@pytest.mark.bpf
def test_leftover_checks_see_a_live_attachment() -> None:
    """The leftover checks are not vacuous: they do see gmpmon's probes while attached.
    (And a live gmpmon has no socket open: nothing listens.)"""
    from tests.gotargets import build

    need_bpftool()
    exe = private_copy(build("lifecycle", "1.27"), "selftest")
    t = start_target(exe)
    g = start_gmpmon("attach", str(t.pid), "--no-tui", "--mode", "full", "-d", "30")
    try:
        wait_attached(t.pid)
        assert uprobes_on(t.pid, str(exe))  # found by the binary's path
        assert uprobes_on(-1, holders=[g.pid])  # and by who holds them
        assert bpf_fds(g.pid)
        # No network listener, nor any socket at all, in a live gmpmon.
        socks = list(fd_links(g.pid).values())
        assert not [s for s in socks if s.startswith("socket:")], socks
        with pytest.raises(AssertionError):
            assert_nothing_left(t.pid, [g.pid], str(exe), settle_s=0)
    finally:
        sigkill(g)
        t.stop()
