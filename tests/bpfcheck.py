"""Can this process run real BPF on real Go programs? Used by tests marked ``@pytest.mark.bpf``.

``require_bpf()`` skips the calling test with the reason when BPF is not usable, or fails it
when ``GMPMON_REQUIRE_BPF=1`` (CI), so that a machine without BPF can never pass CI by
skipping. tests/conftest.py calls it for every test marked ``bpf``.
"""

from __future__ import annotations

import functools
import os

import pytest

# The smallest program that proves BCC can compile against the kernel headers and the
# kernel will load it; the same probe `gmpmon doctor` uses.
_TRIVIAL = "int gm_probe(void *ctx) { return 0; }"


@functools.cache
def bpf_available() -> str | None:
    """None when BPF works here, else one line saying why not."""
    if os.geteuid() != 0:
        return "not root (BPF tests need root, or CAP_BPF+CAP_PERFMON)"
    if not (
        os.path.exists("/sys/bus/event_source/devices/uprobe")
        or os.path.exists("/sys/kernel/tracing/uprobe_events")
        or os.path.exists("/sys/kernel/debug/tracing/uprobe_events")
    ):
        return "kernel has no uprobe support (no uprobe PMU, no tracefs uprobe_events)"
    try:
        from gmpmon._bcc import import_bcc

        bcc = import_bcc()
    except Exception as e:
        return f"BCC not importable: {e}"
    try:
        b = bcc.BPF(text=_TRIVIAL.encode())
        b.load_func(b"gm_probe", bcc.BPF.KPROBE)
        b.cleanup()
    except Exception as e:
        return f"BCC cannot compile/load a trivial program: {str(e).splitlines()[0]}"
    return None


def bpf_required() -> bool:
    return os.environ.get("GMPMON_REQUIRE_BPF", "") not in ("", "0")


def require_bpf() -> None:
    """Skip the calling test if BPF is unusable; fail it instead when GMPMON_REQUIRE_BPF=1."""
    reason = bpf_available()
    if reason is None:
        return
    if bpf_required():
        pytest.fail(f"BPF required (GMPMON_REQUIRE_BPF=1) but unavailable: {reason}")
    pytest.skip(f"BPF unavailable: {reason}")
