"""The parsing half of gmpmon/doctor.py, on real-shaped /proc text and BCC output."""

from __future__ import annotations

from pathlib import Path

import pytest

from gmpmon.doctor import (
    CAP_BPF,
    CAP_PERFMON,
    Check,
    Status,
    effective_caps,
    first_compile_error,
    tracefs_mounts,
)

STATUS = """Name:\tpython3
Umask:\t0022
CapInh:\t0000000000000000
CapPrm:\t000000c000000000
CapEff:\t000000c000000000
CapBnd:\t000001ffffffffff
"""


def test_effective_caps_reads_capeff_not_capbnd() -> None:
    caps = effective_caps(STATUS)
    assert caps == (1 << CAP_BPF) | (1 << CAP_PERFMON)
    assert effective_caps("Name:\tx\n") == 0


def test_tracefs_mounts_finds_every_tracefs() -> None:
    mounts = (
        "proc /proc proc rw 0 0\n"
        "tracefs /sys/kernel/tracing tracefs rw,nosuid 0 0\n"
        "debugfs /sys/kernel/debug debugfs rw 0 0\n"
        "tracefs /sys/kernel/debug/tracing tracefs rw 0 0\n"
    )
    assert tracefs_mounts(mounts) == ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
    assert tracefs_mounts("proc /proc proc rw 0 0\n") == []


def test_first_compile_error_prefers_the_cause() -> None:
    bcc_out = [
        "In file included from <built-in>:2:",
        "/virtual/include/bcc/bpf.h:12:10: fatal error: 'linux/types.h' file not found",
        "#include <linux/types.h>",
    ]
    assert first_compile_error(bcc_out) == "'linux/types.h' file not found"
    assert first_compile_error(["Unable to find kernel headers. Try rebuilding kernel ..."]) == (
        "BCC found no kernel headers"
    )
    assert first_compile_error(["all fine"]) is None


def test_only_required_failures_block_attach() -> None:
    assert Check("BCC", Status.FAIL, "missing", "apt-get install python3-bpfcc").blocks_attach
    assert not Check("BTF", Status.WARN, "missing", "x", required=False).blocks_attach
    assert not Check("BCC", Status.OK, "bcc 0.26").blocks_attach


def test_a_check_that_needs_no_fix_prints_no_fix(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """tracefs unmounted with the perf uprobe PMU present: nothing to do, so no fix line."""
    from gmpmon import doctor

    pmu = tmp_path / "type"
    pmu.write_text("7\n")
    monkeypatch.setattr(doctor, "UPROBE_PMU", pmu)
    monkeypatch.setattr(doctor, "tracefs_mounts", lambda _text: [])
    c = doctor.check_tracefs()
    assert c.fix is None and "not needed" in c.detail
    assert c.status is doctor.Status.OK
