"""Bad input, for real: each case ends in one `gmpmon: ...` line on stderr, its own exit code
(gmpmon/errors.py, docs/exit-codes.md) and no traceback, and never attaches anything.

The environment failures are made for real where that is cheap: a non-root user (setpriv), an
empty kernel header tree (BCC_KERNEL_SOURCE), a kernel without bpf() or without uprobe
attachment (a seccomp filter on gmpmon's own process), binaries patched to claim an old Go
version or to lose the runtime function names gmpmon probes, a C program dressed as Go.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gmpmon import errors
from tests.gotargets import BUILD_ROOT, TARGETS_SRC, _go_env, build, ensure_go
from tests.integration.test_hardening_common import (
    Target,
    assert_one_clean_line,
    run_gmpmon,
    start_target,
    uprobes_on,
)

pytestmark = pytest.mark.bpf

NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all")
WORK = BUILD_ROOT / "hardening"


@pytest.fixture(scope="module")
def go_target() -> Iterator[Target]:
    t = start_target(build("lifecycle", "1.27"))
    yield t
    t.stop()


def expect(code: int, r: subprocess.CompletedProcess[str], *words: str) -> str:
    line = assert_one_clean_line(r)
    assert r.returncode == code, (r.returncode, line)
    for w in words:
        assert w in line, (w, line)
    return line


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# --- the target ------------------------------------------------------------------------


def test_no_such_pid() -> None:
    pid = dead_pid()
    expect(errors.TargetError.exit_code, run_gmpmon("attach", str(pid), "--no-tui", "-d", "1"),
           str(pid))


def test_pid_of_a_non_go_program() -> None:
    t = start_target("sleep", "60", wait_ready=False)
    try:
        r = run_gmpmon("attach", str(t.pid), "--no-tui", "-d", "1")
        expect(errors.NotGoError.exit_code, r, "not a Go program")
    finally:
        t.stop()


def _patched(src: Path, name: str, edit: Callable[[bytes], bytes]) -> Path:
    WORK.mkdir(parents=True, exist_ok=True)
    out = WORK / f"{name}.{os.getpid()}"
    data = edit(src.read_bytes())
    out.write_bytes(data)
    out.chmod(0o755)
    return out


def test_pid_of_a_go_program_of_an_unsupported_version() -> None:
    exe = build("lifecycle", "1.27")
    old = _patched(exe, "go117", lambda b: b.replace(b"go1.27.3", b"go1.17.3"))
    t = start_target(old)  # it still runs: only its version strings changed
    try:
        r = run_gmpmon("attach", str(t.pid), "--no-tui", "-d", "1")
        expect(errors.UnsupportedError.exit_code, r, "go1.17.3", "1.19")
        assert t.proc.poll() is None
    finally:
        t.stop()
        old.unlink()


def test_go_program_for_another_architecture() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    arm = WORK / "lifecycle-arm64"
    if not arm.exists():
        env = dict(_go_env(), GOARCH="arm64")
        subprocess.run([str(ensure_go("1.27")), "build", "-o", str(arm), "./lifecycle"],
                       cwd=TARGETS_SRC, env=env, check=True, capture_output=True, timeout=300)
    # `run` reads the binary before it starts anything.
    r = run_gmpmon("run", "--no-tui", "--", str(arm))
    expect(errors.UnsupportedError.exit_code, r, "arm64", "amd64")
    r = run_gmpmon("inspect", str(arm))
    expect(errors.UnsupportedError.exit_code, r, "arm64")


def test_runtime_functions_missing() -> None:
    """No .symtab (-s -w) and the pclntab names of the scheduler functions damaged: what a
    binary with those functions inlined away or renamed looks like. It still runs."""
    exe = build("lifecycle", "1.27", "stripped")
    bad = _patched(exe, "noexecute",
                   lambda b: b.replace(b"\0runtime.execute\0", b"\0runtime.eXecute\0"))
    t = start_target(bad)
    try:
        r = run_gmpmon("attach", str(t.pid), "--no-tui", "-d", "1")
        expect(errors.MissingSymbolsError.exit_code, r, "runtime.execute")
        assert t.proc.poll() is None
    finally:
        t.stop()
        bad.unlink()


C_LOOKALIKE = r"""
#include <unistd.h>
/* Section names of a Go binary, with a plausible build-info header and junk behind it. */
__attribute__((section(".go.buildinfo"), used))
static const char buildinfo[64] = "\xff Go buildinf:\x08\x02\x00\x00\x00\x00\x00\x00"
                                  "\x00\x00\x00\x00\x00\x00\x00\x00\x08go1.22.1";
__attribute__((section(".gopclntab"), used))
static const unsigned char pclntab[128] = {0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8, 3};
int main(void) { write(1, "ready\n", 6); for (;;) pause(); }
"""


def test_c_program_that_looks_like_go(tmp_path: Path) -> None:
    assert shutil.which("cc"), "no C compiler: gcc (scripts/setup installs it)"
    src = tmp_path / "fake.c"
    src.write_text(C_LOOKALIKE)
    exe = tmp_path / "fake"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True)
    t = start_target(exe)
    try:
        r = run_gmpmon("attach", str(t.pid), "--no-tui", "-d", "1")
        line = assert_one_clean_line(r)
        assert r.returncode in (errors.BinaryFormatError.exit_code,
                                errors.MissingSymbolsError.exit_code), line
        assert t.proc.poll() is None
    finally:
        t.stop()


# --- the machine -----------------------------------------------------------------------


def test_not_root(go_target: Target) -> None:
    r = subprocess.run(
        [*NOBODY, *run_gmpmon_argv("attach", str(go_target.pid), "--no-tui", "-d", "1")],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    expect(errors.PermissionDenied.exit_code, r, "root")


def test_root_without_capabilities(go_target: Target) -> None:
    r = subprocess.run(
        ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--",
         *run_gmpmon_argv("attach", str(go_target.pid), "--no-tui", "-d", "1")],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    expect(errors.PermissionDenied.exit_code, r)
    assert uprobes_on(go_target.pid) == []


def run_gmpmon_argv(*args: str) -> list[str]:
    from tests.integration.test_hardening_common import gmpmon_argv

    return gmpmon_argv(*args)


def test_kernel_headers_missing(go_target: Target, tmp_path: Path) -> None:
    r = run_gmpmon("attach", str(go_target.pid), "--no-tui", "-d", "1",
                   env=dict(os.environ, BCC_KERNEL_SOURCE=str(tmp_path)))
    expect(errors.KernelHeadersError.exit_code, r, "kernel headers", str(tmp_path))
    assert uprobes_on(go_target.pid) == []


# seccomp: a classic-BPF filter on gmpmon's process makes bpf() or uprobe attachment fail as
# on a kernel without them (linux/seccomp.h, linux/filter.h; x86-64 syscall numbers).
_SYS_BPF, _SYS_PERF_EVENT_OPEN = 321, 298
_BPF_LINK_CREATE = 28
_AUDIT_ARCH_X86_64 = 0xC000003E
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _seccomp_filter(no_bpf: bool) -> bytes:
    ld_w, jeq, ret = 0x20, 0x15, 0x06
    prog = [
        _insn(ld_w, 0, 0, 4),  # seccomp_data.arch
        _insn(jeq, 1, 0, _AUDIT_ARCH_X86_64),
        _insn(ret, 0, 0, _RET_ALLOW),
        _insn(ld_w, 0, 0, 0),  # seccomp_data.nr
    ]
    if no_bpf:
        prog += [
            _insn(jeq, 0, 1, _SYS_BPF),
            _insn(ret, 0, 0, _RET_ERRNO | errno.ENOSYS),
        ]
    else:
        # No uprobes: perf_event_open fails, and so does bpf(BPF_LINK_CREATE) (uprobe_multi).
        prog += [
            _insn(jeq, 0, 1, _SYS_PERF_EVENT_OPEN),
            _insn(ret, 0, 0, _RET_ERRNO | errno.ENOENT),
            _insn(jeq, 0, 3, _SYS_BPF),
            _insn(ld_w, 0, 0, 16),  # seccomp_data.args[0], low half
            _insn(jeq, 0, 1, _BPF_LINK_CREATE),
            _insn(ret, 0, 0, _RET_ERRNO | errno.EOPNOTSUPP),
        ]
    prog.append(_insn(ret, 0, 0, _RET_ALLOW))
    return b"".join(prog)


def _install_seccomp(no_bpf: bool) -> Callable[[], None]:
    code = _seccomp_filter(no_bpf)

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        ul = ctypes.c_ulong
        libc.prctl.argtypes = [ctypes.c_int, ul, ul, ul, ul]
        buf = ctypes.create_string_buffer(code, len(code))
        fprog = struct.pack("<HxxxxxxQ", len(code) // 8, ctypes.addressof(buf))
        fbuf = ctypes.create_string_buffer(fprog, len(fprog))
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            os._exit(90)
        if libc.prctl(22, 2, ctypes.addressof(fbuf), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
            os._exit(91)

    return preexec


@pytest.mark.parametrize("what", ["no-bpf", "no-uprobes", "no-uprobes-before-6.6"])
def test_bpf_or_uprobes_unavailable(go_target: Target, what: str) -> None:
    # "before-6.6": the per-site perf-event uprobes that kernels without uprobe_multi get.
    env = dict(os.environ, GMPMON_NO_UPROBE_MULTI="1" if what.endswith("6.6") else "0")
    r = run_gmpmon("attach", str(go_target.pid), "--no-tui", "-d", "1", env=env,
                   preexec_fn=_install_seccomp(what == "no-bpf"))
    assert r.returncode not in (90, 91), "could not install the seccomp filter"
    expect(errors.KernelSupportError.exit_code, r)
    assert uprobes_on(go_target.pid) == []
    assert go_target.proc.poll() is None


# --- files -----------------------------------------------------------------------------


def test_unwritable_output_is_refused_before_attaching(go_target: Target,
                                                         tmp_path: Path) -> None:
    link = tmp_path / "planted"
    link.symlink_to("/etc/gmpmon-should-never-exist")
    cases = {
        "--record": str(tmp_path / "no" / "such" / "dir" / "r.gmp"),
        "--summary-json": str(link),
        "--folded": str(tmp_path),  # a directory
    }
    for opt, path in cases.items():
        t0 = time.monotonic()
        r = run_gmpmon("attach", str(go_target.pid), "--no-tui", "-d", "5", opt, path)
        took = time.monotonic() - t0
        expect(errors.OutputPathError.exit_code, r, path)
        # Refused before anything was compiled or attached: no capture wasted.
        assert took < 3, f"{opt}: {took:.1f}s: was something attached first?"
    assert not Path("/etc/gmpmon-should-never-exist").exists()
    # Checked before even looking at the target.
    r = run_gmpmon("attach", str(dead_pid()), "--record", str(link))
    expect(errors.OutputPathError.exit_code, r, "symbolic link")


def test_unreadable_recording(tmp_path: Path) -> None:
    rec = tmp_path / "r.gmp"
    rec.write_bytes(b"GMPMONRC" + b"\x01\x00\x00\x00" + b"\x00" * 64)
    rec.chmod(0o600)
    tmp_path.chmod(0o755)
    r = subprocess.run([*NOBODY, *run_gmpmon_argv("replay", str(rec), "--no-tui")],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    expect(errors.RecordingError.exit_code, r, "ermission denied")


def test_hostile_and_truncated_recordings(tmp_path: Path) -> None:
    cases = {
        "empty": b"",
        "not-one": b"#!/bin/sh\necho hi\n",
        "header-cut": b"GMPMONRC\x01\x00\x00\x00\xff\x00",
        "huge-header": b"GMPMONRC\x01\x00\x00\x00" + struct.pack("<II", 0xFFFFFFF0, 0),
        "future-version": b"GMPMONRC\x63\x00\x00\x00",
        "json-bomb": _with_header(b"[" * 100000 + b"]" * 100000),
        "not-an-object": _with_header(b"42"),
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        r = run_gmpmon("replay", str(p), "--no-tui")
        expect(errors.RecordingError.exit_code, r, str(p))
        r = run_gmpmon("export", str(p), "--format", "json", "-o", str(tmp_path / "o.json"))
        expect(errors.RecordingError.exit_code, r, str(p))


def _with_header(body: bytes) -> bytes:
    import zlib

    return b"GMPMONRC\x01\x00\x00\x00" + struct.pack("<II", len(body), zlib.crc32(body)) + body
