"""`gmpmon attach` on running Go programs: numbers, modes, and never harming the target.

"No probe left" is checked where it matters, in the target: a uprobe is an int3 (0xCC)
written over the probed instruction in the process's text, so reading /proc/PID/mem at every
probe site shows whether any is still there. The BPF programs gmpmon held (fdinfo of its bpf
fds) must be gone from the kernel too. Targets are copies of the cached workload binaries,
so that no other gmpmon run on the same file (uprobes belong to the inode) can interfere.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gotargets import build, versions
from tests.integration.test_capture import GM, TIMEOUT, env

HOT_HANDLERS = ("gmpmon_execute", "gmpmon_findrunnable", "gmpmon_gopark", "gmpmon_ready")


class Proc:
    """A subprocess whose stdout lines are collected by a thread (waitable, no deadlock)."""

    def __init__(self, argv: list[str], **kw: Any) -> None:
        self.p = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, **kw,
        )
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self.err = ""
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def _pump_err(self) -> None:
        assert self.p.stderr is not None
        self.err = self.p.stderr.read()

    def wait_line(self, prefix: str, timeout: float = 30) -> str:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line starting {prefix!r}; got {self.lines} {self.err}")
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"EOF before {prefix!r}; got {self.lines} {self.err}")
            if line.startswith(prefix):
                return line

    def send(self, text: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(text)
        self.p.stdin.flush()

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=10)


def copy_target(tmp_path: Path, name: str, go: str = "1.27", mode: str = "default") -> Path:
    dst = tmp_path / name
    shutil.copy2(build(name, go, mode), dst)
    return dst


def probe_sites(exe: Path, multi: bool = True) -> tuple[list[int], list[int]]:
    """(hot, cold) probe addresses of gmpmon's plan for this binary (non-PIE: = runtime);
    ``multi=False``: the per-site perf fallback's plan (RETs where uprobe_multi would put
    the exits on branches: no attach cookie carries their condition there)."""
    from gmpmon.binary import load
    from gmpmon.capture.bpfprog import plan_probes

    old = os.environ.get("GMPMON_NO_UPROBE_MULTI")
    if not multi:
        os.environ["GMPMON_NO_UPROBE_MULTI"] = "1"
    try:
        plan = plan_probes(load(str(exe)))
    finally:
        if old is None:
            os.environ.pop("GMPMON_NO_UPROBE_MULTI", None)
        else:
            os.environ["GMPMON_NO_UPROBE_MULTI"] = old
    return [s.addr for s in plan.hot], [s.addr for s in plan.cold]


def int3_sites(pid: int, addrs: list[int]) -> list[int]:
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        return [a for a in addrs if os.pread(fd, 1, a) == b"\xcc"]
    finally:
        os.close(fd)


def bpf_prog_ids(pid: int) -> set[int]:
    ids: set[int] = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("prog_id:"):
                ids.add(int(line.split()[1]))
    return ids


def prog_exists(prog_id: int) -> bool:
    r = subprocess.run(["bpftool", "prog", "show", "id", str(prog_id)], capture_output=True)
    return r.returncode == 0


def eventually(cond: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


def attach(pid: int, *opts: str) -> Proc:
    return Proc([*GM, "attach", str(pid), "--no-tui", *opts])


@pytest.mark.bpf
@pytest.mark.parametrize("go", [pytest.param(v, id=f"go{v}") for v in versions()])
def test_attach_full_counts_exactly_and_target_output_is_unchanged(
    tmp_path: Path, go: str
) -> None:
    exe = build("sleeper", go)
    args = ["-n", "150", "-d", "2ms"]
    plain = subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=TIMEOUT, env=env(GOMAXPROCS="1")
    )
    target = Proc([str(exe), *args, "-wait-stdin"], env=env(GOMAXPROCS="1"))
    try:
        target.wait_line("ready")
        summary = tmp_path / "s.json"
        gm = attach(target.p.pid, "--mode", "full", "--summary-json", str(summary))
        gm.wait_line("Tracing Go scheduler of PID")
        target.send("\n")  # the work starts only now: every sleep happens under the probes
        assert target.p.wait(timeout=TIMEOUT) == 0
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err  # ends by itself when the target exits
    finally:
        target.kill()
    assert "Traceback" not in gm.err
    assert target.lines == plain.stdout.splitlines()
    s = json.loads(summary.read_text())
    assert s["park_reasons"]["sleep"]["count"] == 150
    assert s["target"]["gomaxprocs"] == 1
    assert s["target"]["pid"] == target.p.pid
    assert s["target"]["go_version"].startswith(f"go{go}")
    assert s["mode"] == "full"


@pytest.mark.bpf
@pytest.mark.parametrize("build_mode", ["default", "stripped"])
def test_sample_mode_puts_no_probe_on_hot_functions(tmp_path: Path, build_mode: str) -> None:
    exe = copy_target(tmp_path, "sleeper", "1.27", build_mode)
    hot, cold = probe_sites(exe)
    target = Proc([str(exe), "-n", "100000", "-d", "1ms"])
    try:
        target.wait_line("ready")
        summary = tmp_path / "s.json"
        gm = attach(target.p.pid, "--mode", "sample", "--duration", "2", "--summary-json",
                    str(summary))
        gm.wait_line("Tracing Go scheduler of PID")
        time.sleep(0.3)
        assert int3_sites(target.p.pid, hot) == []
        assert int3_sites(target.p.pid, cold) == cold  # the cold probes are there
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
        assert target.p.poll() is None
        assert eventually(lambda: int3_sites(target.p.pid, hot + cold) == [])
    finally:
        target.kill()
    s = json.loads(summary.read_text())
    assert s["mode"] == "sample"
    # The sampler read every P's state (-s -w too: its globals are found in the code and
    # validated on the process): the time of both Ps is accounted for.
    assert "no sampler" not in gm.err, gm.err
    for p in s["procs"]:
        assert p["running_ns"] + p["idle_ns"] + p["spinning_ns"] > 0.5e9


@pytest.mark.bpf
@pytest.mark.parametrize("mode", ["default", "full"])
def test_default_mode_duty_cycles_the_hot_probes(tmp_path: Path, mode: str) -> None:
    exe = copy_target(tmp_path, "sleeper")
    hot, _cold = probe_sites(exe)
    target = Proc([str(exe), "-n", "100000", "-d", "1ms"])
    try:
        target.wait_line("ready")
        summary = tmp_path / "s.json"
        # A sleeper uses ~4% of a CPU: at the default 1% budget its windows would be a few
        # ms, too short to see reliably from here. The first window may wait up to 1.5 s for
        # gmpmon's own cost to be measured (hotctl.WATCH_WAIT_NS): once in CI, 1.5 s of
        # looking saw none; 3 s of looking covers it and several windows after.
        gm = attach(target.p.pid, "--mode", mode, "--duration", "4", "--window-ms", "100",
                    "--period-ms", "500", "--budget", "100", "--summary-json", str(summary))
        gm.wait_line("Tracing Go scheduler of PID")
        seen = set()
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            seen.add(len(int3_sites(target.p.pid, hot)) > 0)
            time.sleep(0.01)
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        target.kill()
    s = json.loads(summary.read_text())
    if mode == "full":
        assert seen == {True}
    else:
        assert seen == {True, False}  # attached in windows, detached in between
        assert s["windows"]["count"] >= 3
        assert s["park_reasons"]["sleep"]["count"] > 0


def stacks_of(pid: int) -> str:
    """Every thread's Python stack of a process that hangs (py-spy dump), for the failure."""
    spy = Path(sys.executable).with_name("py-spy")
    r = subprocess.run([str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True,
                       timeout=60)
    return r.stdout + r.stderr


@pytest.mark.bpf
@pytest.mark.parametrize("how", ["duration", "sigint", "sigterm", "sigkill", "early-sigint"])
def test_detach_leaves_no_probe_and_the_target_running(tmp_path: Path, how: str) -> None:
    exe = copy_target(tmp_path, "sleeper")
    hot, cold = probe_sites(exe)
    target = Proc([str(exe), "-n", "1000000", "-d", "1ms"])
    try:
        target.wait_line("ready")
        duration = "1" if how == "duration" else "60"
        gm = attach(target.p.pid, "--mode", "full", "--duration", duration)
        progs: set[int] = set()
        if how == "early-sigint":
            time.sleep(0.3)  # interrupted while it loads and attaches
        else:
            gm.wait_line("Tracing Go scheduler of PID")
            progs = bpf_prog_ids(gm.p.pid)
            assert progs
            assert int3_sites(target.p.pid, hot + cold) == hot + cold
        sig = {"sigint": signal.SIGINT, "early-sigint": signal.SIGINT,
               "sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}.get(how)
        if sig is not None:
            gm.p.send_signal(sig)
        try:
            # 60 s: a signal during the compiles ends the run once they are done, and they
            # take seconds on a loaded machine.
            code = gm.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"gmpmon did not end after {how}:\n{stacks_of(gm.p.pid)}"
                                 ) from None
        if how == "sigkill":
            assert code == -signal.SIGKILL
        elif how == "early-sigint":
            # Interrupted while still starting (maybe inside Python's own imports): any of
            # the usual Ctrl-C outcomes; what matters is below.
            assert code in (0, 130, -signal.SIGINT), gm.err
        else:
            assert code in (0, 130), gm.err
            assert "Traceback" not in gm.err
        assert eventually(lambda: int3_sites(target.p.pid, hot + cold) == [])
        assert eventually(lambda: not any(prog_exists(i) for i in progs))
        time.sleep(0.3)
        assert target.p.poll() is None  # still running
    finally:
        target.kill()


def test_attach_rejects_bad_input_with_one_line(tmp_path: Path) -> None:
    from gmpmon.errors import NotGoError, OutputPathError, TargetError, UsageError

    def gm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*GM, "attach", *args], capture_output=True, text=True, timeout=60)

    r = gm("999999999", "--no-tui")
    assert r.returncode == TargetError.exit_code and r.stderr.startswith("gmpmon: no process")
    assert len(r.stderr.strip().splitlines()) == 1
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        r = gm(str(sleeper.pid), "--no-tui")
        assert r.returncode == NotGoError.exit_code, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        r = gm(str(sleeper.pid), "--summary-json", str(tmp_path / "no" / "such" / "dir.json"))
        assert r.returncode == OutputPathError.exit_code and "does not exist" in r.stderr
        r = gm(str(sleeper.pid), "--duration", "0")
        assert r.returncode == UsageError.exit_code
    finally:
        sleeper.kill()
        sleeper.wait()
