"""The one place that imports BCC, and what both capture and doctor need around it: the
bpf() syscall number, the uprobe PMU, where BCC finds kernel headers and how its compiler's
C++ output is caught. Debian's python3-bpfcc lives outside any venv."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from gmpmon.errors import KernelSupportError

DIST_PACKAGES = "/usr/lib/python3/dist-packages"
SYS_BPF = 321  # x86_64
UPROBE_PMU = Path("/sys/bus/event_source/devices/uprobe/type")  # exists: a uprobe perf PMU


def import_bcc() -> ModuleType:
    try:
        import bcc
    except ImportError:
        if DIST_PACKAGES not in sys.path:
            sys.path.append(DIST_PACKAGES)  # appended: the venv's own packages still win
        try:
            import bcc
        except ImportError as e:
            raise KernelSupportError(
                "BCC is not importable", hint="apt-get install python3-bpfcc"
            ) from e
    module: ModuleType = bcc  # typed here: mypy sees the untyped bcc as Any
    return module


def bcc_version() -> str:
    """BCC's version without importing it: importing BCC loads libbcc.so, which maps LLVM
    and clang (~53 MB resident) into the process for good."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("bcc")
    if spec is None and DIST_PACKAGES not in sys.path:
        sys.path.append(DIST_PACKAGES)
        spec = importlib.util.find_spec("bcc")
    if spec is None or not spec.submodule_search_locations:
        raise KernelSupportError("BCC is not importable", hint="apt-get install python3-bpfcc")
    for d in spec.submodule_search_locations:
        try:
            with open(os.path.join(d, "version.py")) as f:
                m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", f.read())
        except OSError:
            continue
        if m:
            return m.group(1)
    return "unknown"


def header_dir() -> tuple[str, str]:
    """The kernel header tree BCC will compile against, and where that choice came from."""
    env = os.environ.get("BCC_KERNEL_SOURCE")
    if env:
        return env, "BCC_KERNEL_SOURCE"
    return f"/lib/modules/{os.uname().release}/build", "default"


def headers_present(hdr: str, origin: str) -> bool:
    """Where BCC looks for kernel headers (its KERNEL_SOURCE env, /lib/modules/R/build or
    source, else the kernel's own kheaders archive)."""
    if os.path.isdir(os.path.join(hdr, "include")):
        return True
    if origin == "BCC_KERNEL_SOURCE":
        return False
    release = os.uname().release
    return os.path.isdir(f"/lib/modules/{release}/source/include") or os.path.exists(
        "/sys/kernel/kheaders.tar.xz"
    )


@contextmanager
def captured_output() -> Iterator[list[str]]:
    """BCC's compiler writes diagnostics to fd 2 and its header hints to fd 1 (C++ streams,
    not Python's): catch both so that one line can be printed instead."""
    lines: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+") as tmp:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield lines
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            lines.extend(tmp.read().splitlines())


def first_compile_error(stderr_lines: list[str]) -> str | None:
    """The line of BCC's output that says why a compile failed, if any."""
    for line in stderr_lines:
        if line.startswith("Unable to find kernel headers"):
            return "BCC found no kernel headers"
        if "error:" in line:
            return line.split("error:", 1)[1].strip()
    return None


def _scalar(x: object) -> int:
    return x if isinstance(x, int) else int(x.value)  # type: ignore[attr-defined]


def scalar_items(table: object) -> list[tuple[int, int]]:
    """(key, value) of a BCC table whose key and value are scalars, in one syscall where the
    kernel has batch ops. BCC's batch lookup yields plain ints for scalar types and its
    item walk yields ctypes; both come out as ints here."""
    try:
        pairs = list(table.items_lookup_batch())  # type: ignore[attr-defined]
    except Exception:  # kernels without batch ops: BCC raises a bare Exception
        pairs = list(table.items())  # type: ignore[attr-defined]
    return [(_scalar(k), _scalar(v)) for k, v in pairs]
