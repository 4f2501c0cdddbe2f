"""Can this machine attach gmpmon to a Go program? One check per prerequisite.

Each check returns a :class:`Check`: a status, what was found, and on failure the exact fix.
Checks read /proc, /sys and try small BPF programs, but never print: `gmpmon doctor`
(gmpmon/commands/doctor.py) formats them.

Checks marked ``required=False`` (BTF, a Go toolchain) are reported as ``warn`` when missing:
gmpmon can attach without them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import glob
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from gmpmon._bcc import (
    SYS_BPF,
    UPROBE_PMU,
    captured_output,
    first_compile_error,
    header_dir,
)

CAP_SYS_ADMIN = 21
CAP_PERFMON = 38
CAP_BPF = 39
BPF_MAP_CREATE = 0
BPF_MAP_TYPE_ARRAY = 2

# The fix for anything about kernel headers: scripts/setup installs Debian's headers and,
# when the running kernel has none, links the newest Debian header tree in its place.
HEADERS_FIX = (
    "apt-get install linux-headers-$(uname -r), or run scripts/setup "
    "(links Debian's linux-headers-*-common + -amd64 to /lib/modules/$(uname -r)/build)"
)

TRIVIAL_PROG = "int gm_doctor(void *ctx) { return 0; }"

# A ring buffer (BPF_MAP_TYPE_RINGBUF, kernel >= 5.8) is how gmpmon ships events.
RINGBUF_PROG = """
BPF_RINGBUF_OUTPUT(gm_doctor_events, 1);
int gm_doctor(void *ctx) {
    u64 v = 1;
    gm_doctor_events.ringbuf_output(&v, sizeof(v), 0);
    return 0;
}
"""


class Status(Enum):
    OK = "ok"
    FAIL = "FAIL"
    WARN = "warn"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None
    required: bool = True

    @property
    def blocks_attach(self) -> bool:
        return self.status is Status.FAIL and self.required


def _ok(name: str, detail: str, *, required: bool = True) -> Check:
    return Check(name, Status.OK, detail, None, required)


def _fail(name: str, detail: str, fix: str, *, required: bool = True) -> Check:
    return Check(name, Status.FAIL if required else Status.WARN, detail, fix, required)


# --- privileges -------------------------------------------------------------------------


def effective_caps(status_text: str) -> int:
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)$", status_text, re.MULTILINE)
    return int(m.group(1), 16) if m else 0


def check_privileges() -> Check:
    # Capabilities, not the uid, decide: root with an emptied bounding set (containers,
    # setpriv) cannot load BPF, and a non-root user with CAP_BPF+CAP_PERFMON can.
    name = "privileges"
    caps = effective_caps(Path("/proc/self/status").read_text())
    uid = os.geteuid()
    who = "root" if uid == 0 else f"uid {uid}"
    if caps & (1 << CAP_SYS_ADMIN):
        return _ok(name, f"{who} with CAP_SYS_ADMIN")
    need = (1 << CAP_BPF) | (1 << CAP_PERFMON)
    if caps & need == need:
        return _ok(name, f"{who} with CAP_BPF+CAP_PERFMON")
    fix = (
        "run as root: sudo gmpmon ..."
        if uid != 0
        else "root has lost its capabilities (container or setpriv): run with CAP_BPF+CAP_PERFMON "
        "(e.g. docker run --privileged, or outside the restricted sandbox)"
    )
    return _fail(name, f"{who} without CAP_SYS_ADMIN or CAP_BPF+CAP_PERFMON", fix)


# --- bpf() syscall ----------------------------------------------------------------------


class _MapCreateAttr(ctypes.Structure):
    _fields_ = [
        ("map_type", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("pad", ctypes.c_uint8 * 108),
    ]


def check_bpf_syscall() -> Check:
    """bpf(BPF_MAP_CREATE) of a one-slot array: the cheapest proof that bpf() is allowed."""
    name = "bpf() syscall"
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    attr = _MapCreateAttr(BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0)
    fd = libc.syscall(SYS_BPF, BPF_MAP_CREATE, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd >= 0:
        os.close(fd)
        return _ok(name, "map create works")
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        return _fail(name, "bpf() not implemented", "use a kernel built with CONFIG_BPF_SYSCALL=y")
    if err in (errno.EPERM, errno.EACCES):
        return _fail(
            name,
            f"bpf() denied ({errno.errorcode[err]})",
            "run as root (sudo), and check seccomp/container limits on bpf()",
        )
    return _fail(name, f"bpf() failed: {os.strerror(err)}", "check the kernel's BPF support")


# --- tracefs, uprobes, BTF --------------------------------------------------------------


def tracefs_mounts(mounts_text: str) -> list[str]:
    return [
        fields[1]
        for line in mounts_text.splitlines()
        if len(fields := line.split()) >= 3 and fields[2] == "tracefs"
    ]


def check_tracefs() -> Check:
    # BCC attaches uprobes through the perf uprobe PMU when the kernel has one (4.17+) and
    # only falls back to tracefs's uprobe_events without it: tracefs is then optional.
    name = "tracefs"
    where = tracefs_mounts(Path("/proc/mounts").read_text())
    if where:
        return _ok(name, f"mounted at {where[0]}")
    if UPROBE_PMU.exists():
        # Nothing to fix: a warning with a fix line would tell the user to do something.
        return _ok(name, "not mounted (not needed: the perf uprobe PMU is used)",
                   required=False)
    return _fail(name, "not mounted", "mount -t tracefs nodev /sys/kernel/tracing")


def check_uprobes() -> Check:
    name = "uprobe events"
    if UPROBE_PMU.exists():
        return _ok(name, f"perf uprobe PMU ({UPROBE_PMU.parent})")
    for events in ("/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events"):
        if os.path.exists(events):
            return _ok(name, events)
    return _fail(
        name, "no uprobe PMU and no uprobe_events", "use a kernel with CONFIG_UPROBE_EVENTS=y"
    )


def check_btf() -> Check:
    name = "BTF"
    if Path("/sys/kernel/btf/vmlinux").exists():
        return _ok(name, "/sys/kernel/btf/vmlinux", required=False)
    return _fail(
        name,
        "no /sys/kernel/btf/vmlinux (gmpmon's uprobes do not need it)",
        "use a kernel with CONFIG_DEBUG_INFO_BTF=y",
        required=False,
    )


# --- BCC and kernel headers -------------------------------------------------------------


def check_bcc() -> Check:
    name = "BCC"
    from gmpmon._bcc import import_bcc
    from gmpmon.errors import GmpmonError

    try:
        bcc = import_bcc()
    except GmpmonError as e:
        return _fail(name, str(e), e.hint or "apt-get install python3-bpfcc")
    where = Path(bcc.__file__ or "?").parent
    return _ok(name, f"bcc {getattr(bcc, '__version__', '?')} from {where}")


def _compile_and_load(text: str) -> str | None:
    """None if `text` compiles and its gm_doctor function loads as a kprobe-type program."""
    from gmpmon._bcc import import_bcc

    try:
        bcc = import_bcc()
    except Exception as e:
        return f"BCC not importable ({e})"
    with captured_output() as errs:
        try:
            b = bcc.BPF(text=text.encode())
            try:
                b.load_func(b"gm_doctor", bcc.BPF.KPROBE)
            finally:
                b.cleanup()
        except Exception as e:
            failure: str | None = str(e).splitlines()[0] if str(e) else type(e).__name__
        else:
            failure = None
    if failure is None:
        return None
    return first_compile_error(errs) or failure


def check_compile() -> Check:
    name = "BPF compile+load"
    hdr, origin = header_dir()
    failure = _compile_and_load(TRIVIAL_PROG)
    if failure is None:
        return _ok(name, f"headers {hdr} ({os.path.realpath(hdr)})")
    if "not importable" in failure:
        return _fail(name, failure, "apt-get install python3-bpfcc")
    if not os.path.isdir(os.path.join(hdr, "include")):
        if origin == "BCC_KERNEL_SOURCE":
            where = "$BCC_KERNEL_SOURCE"
            fix = "unset BCC_KERNEL_SOURCE or point it at a kernel header tree; " + HEADERS_FIX
        else:
            where, fix = "no kernel headers", HEADERS_FIX
        return _fail(name, f"{where}: {hdr} has no include/ ({failure})", fix)
    return _fail(name, f"with headers {hdr}: {failure}", HEADERS_FIX)


def check_ringbuf() -> Check:
    name = "ring buffer"
    failure = _compile_and_load(RINGBUF_PROG)
    if failure is None:
        return _ok(name, "BPF_RINGBUF_OUTPUT compiles and loads")
    return _fail(
        name, failure, "use a kernel >= 5.8 (BPF ring buffer), after the compile check passes"
    )


# --- Go toolchain (only for the bundled demo and the tests) -----------------------------


def find_go() -> str | None:
    candidates = [shutil.which("go") or "", "/usr/lib/go-1.19/bin/go"]
    candidates += sorted(glob.glob("/opt/gmpmon-go/go*/bin/go"), reverse=True)
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def check_go() -> Check:
    name = "Go toolchain"
    go = find_go()
    if go:
        return _ok(name, f"{go} (for the demo)", required=False)
    return _fail(
        name,
        "none found (only the demo and tests need one)",
        "apt-get install golang-1.19-go, or run scripts/setup",
        required=False,
    )


CHECKS: tuple[Callable[[], Check], ...] = (
    check_privileges,
    check_bpf_syscall,
    check_tracefs,
    check_uprobes,
    check_btf,
    check_bcc,
    check_compile,
    check_ringbuf,
    check_go,
)


# A check that cannot mean anything when an earlier one failed is reported as failed
# because of it, so the user starts with the real cause.
DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "BPF compile+load": ("privileges", "BCC"),
    "ring buffer": ("privileges", "BCC", "BPF compile+load"),
}


def run_checks() -> list[Check]:
    results: list[Check] = []
    for check in CHECKS:
        name = check.__name__.removeprefix("check_")
        try:
            result = check()
        except Exception as e:  # a check that crashes is a failed check, not a traceback
            result = Check(name, Status.FAIL, f"check crashed: {e!r}", "report a bug")
        failed = {r.name for r in results if r.status is Status.FAIL}
        dep = next((d for d in DEPENDS_ON.get(result.name, ()) if d in failed), None)
        if dep and result.status is Status.FAIL:
            result = Check(result.name, Status.FAIL, f"untested: {dep} failed", f"fix {dep} first")
        results.append(result)
    return results
