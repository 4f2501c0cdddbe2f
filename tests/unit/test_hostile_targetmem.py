"""The one checked reader of a target's memory: a hostile address or length is gmpmon's own
error, never OverflowError or a huge allocation; readv reads many spans and marks the
unreadable ones. Read from a real child process (no root needed for one's own child)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gmpmon.capture.targetmem import USER_END, TargetMemory, check_count, check_span
from gmpmon.errors import TargetMemoryError

# A child that holds a known buffer and prints its address.
CHILD = (
    "import ctypes,sys;b=ctypes.create_string_buffer(b'gmpmon-hostile'*4096);"
    "print(ctypes.addressof(b),flush=True);sys.stdin.read()"
)


@pytest.fixture
def child() -> tuple[int, int]:
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    addr = int(p.stdout.readline())
    yield p.pid, addr
    p.kill()
    p.wait()


@pytest.mark.parametrize("addr,size", [
    (0, 8), (0xffff800000001000, 8), (0xffffffffffffff00, 8), (USER_END - 4, 8), (-8, 8),
    (0x1000, -1), (0x1000, 1 << 40), (1 << 64, 8),
])
def test_check_span_refuses(addr: int, size: int) -> None:
    with pytest.raises(TargetMemoryError):
        check_span(addr, size)


def test_check_span_and_count_pass_plausible_values() -> None:
    check_span(0xc000010000, 4096)
    check_span(USER_END - 8, 8)
    assert check_count("allglen", 100_000, 1 << 24) == 100_000
    with pytest.raises(TargetMemoryError, match="allglen is 1099511627771"):
        check_count("allglen", 1099511627771, 1 << 24)


def test_read_refuses_kernel_half_pointer_with_own_error(child: tuple[int, int]) -> None:
    pid, addr = child
    mem = TargetMemory(pid)
    try:
        assert mem.read(addr, 14) == b"gmpmon-hostile"
        for bad in (0xffff800000001000, 0xffffffffffffff00):
            with pytest.raises(TargetMemoryError, match="not a user-space address"):
                mem.read(bad, 8)
        with pytest.raises(TargetMemoryError):
            mem.read(addr, 1 << 40)
        with pytest.raises(OSError):
            mem.read(0x1000, 8)  # unmapped: the ordinary "cannot read" error
    finally:
        mem.close()


def test_readv_reads_many_spans_and_marks_bad_ones(child: tuple[int, int]) -> None:
    pid, addr = child
    mem = TargetMemory(pid)
    try:
        spans = [(addr + 14 * i, 14) for i in range(3000)]
        spans[5] = (0xffff800000001000, 8)    # kernel half
        spans[700] = (0x1000, 8)              # unmapped page
        spans[2500] = (addr, 1 << 40)         # over the cap
        before = mem.reads
        got = mem.readv(spans)
        assert got[5] is None and got[700] is None and got[2500] is None
        assert [g for i, g in enumerate(got) if i not in (5, 700, 2500)] == \
            [b"gmpmon-hostile"] * 2997
        assert mem.reads - before <= 8  # batched: a few calls, not 3000
    finally:
        mem.close()


def test_readv_of_a_gone_process_raises_oserror(child: tuple[int, int]) -> None:
    pid, addr = child
    mem = TargetMemory(pid)
    subprocess.run(["kill", "-9", str(pid)], check=True)
    import os
    os.waitpid(pid, 0)
    try:
        with pytest.raises(OSError):
            mem.readv([(addr, 8)])
    finally:
        mem.close()


def test_a_stopped_reader_is_named_in_the_report_and_the_summary() -> None:
    """RT_MISSING with a1 = 1 (its reader stopped mid-run) -> runtime.stopped and the
    report's "not available ... (its reader stopped ...)"; a1 = 0 stays a plain absence."""
    from gmpmon.events import NO_P, Kind, RtFeature
    from gmpmon.export.json import runtime_summary
    from gmpmon.model.runtime import RuntimePart
    from gmpmon.report import runtime_lines

    part = RuntimePart(("idle",), ("",), {})
    part.on_missing((1, Kind.RT_MISSING, NO_P, 0, 0, int(RtFeature.CENSUS), 1))
    part.on_missing((1, Kind.RT_MISSING, NO_P, 0, 0, int(RtFeature.STW), 0))
    rv = part.view()
    assert rv is not None
    assert rv.stopped == ("goroutine census (allgs)",)
    summary = runtime_summary(rv)
    assert summary is not None and summary["stopped"] == ["goroutine census (allgs)"]
    text = "\n".join(runtime_lines(rv))
    assert "not available: goroutine census (allgs) (its reader stopped" in text
    assert "stop-the-world" in text and "stop-the-world pauses (sched.stwTotalTime*, Go " \
        "1.22+) (its reader" not in text


def test_a_failed_read_is_skipped_while_the_target_runs_and_raised_once_it_is_gone(
    child: tuple[int, int]
) -> None:
    """Skips.failed: an unmapped page or a kernel-half pointer while the target runs is one
    skipped read with its reason (never "the target exited"); the same OSError once the
    target is gone ends the reader as the target's exit."""
    import os

    from gmpmon.capture.targetmem import Skips, why_span

    pid, _addr = child
    mem = TargetMemory(pid)
    skips = Skips()
    try:
        for what, bad in (("allp[0].m = 0x1000", 0x1000), ("allgs[3]", 0xffff800000001000)):
            try:
                mem.read(bad, 8)
            except (OSError, TargetMemoryError) as e:
                skips.failed(pid, what, e)
        assert skips.n == 2 and skips.take() == 2 and skips.take() == 0
        assert skips.first == ("allp[0].m = 0x1000: cannot read the target's memory "
                               "(Input/output error): no mapped page there"), skips.first
        assert "not a user-space address" in why_span(0xffff800000001000, 8)
        assert "no mapped page there" in why_span(0x1000, 8)
        subprocess.run(["kill", "-9", str(pid)], check=True)
        os.waitpid(pid, 0)
        with pytest.raises(OSError):
            try:
                mem.read(0x1000, 8)
            except OSError as e:
                skips.failed(pid, "allp[0].m = 0x1000", e)
        assert skips.n == 2
    finally:
        mem.close()


def test_readers_notes_reach_the_report_and_the_summary_with_their_reason() -> None:
    """ReaderNotes -> RT_MISSING (a1 = 1) / RT_SKIPPED events and their reasons in the stacks
    table -> the model -> the report and the summary JSON: which part, stopped or skipped
    (how many), and why; a reason shared by several features is said once."""
    from gmpmon.capture.readernotes import ReaderNotes
    from gmpmon.capture.targetmem import Skips
    from gmpmon.events import EventTuple, Kind, RtFeature
    from gmpmon.export.json import runtime_summary
    from gmpmon.model.runtime import RuntimePart
    from gmpmon.report import runtime_lines

    notes = ReaderNotes()
    sampler = Skips()
    notes.watch("P sampler", RtFeature.P_SAMPLES, sampler)
    bad = TargetMemoryError("the target's len(allp) is 7, outside 0..1")
    notes.stopped("runtime counters' per-P ticks", bad,
                  (RtFeature.P_TICKS, RtFeature.GOROUTINES), 5)
    for _ in range(3):
        sampler.add("allp[0].m = 0xffffffffffffff00", "refused a read")
    stacks: dict[int, tuple[str, ...]] = {}
    events: list[EventTuple] = []
    notes.take(10, events, stacks)
    sampler.add("allp[0].m = 0xffffffffffffff00", "refused a read")
    notes.take(20, events, stacks)
    assert [e[1] for e in events].count(Kind.RT_SKIPPED) == 2
    assert all(e[0] >= 10 for e in events)  # stamped when handed on
    part = RuntimePart(("idle",), ("",), stacks)
    for e in events:
        (part.on_missing if e[1] == Kind.RT_MISSING else part.on_skipped)(e)
    rv = part.view()
    assert rv is not None
    summary = runtime_summary(rv)
    assert summary is not None
    assert summary["failed"] == [
        {"part": "goroutine count (allglen, free lists)", "stopped": True, "skipped_reads": 0,
         "why": "the target's len(allp) is 7, outside 0..1"},
        {"part": "per-P schedules and syscalls (p.schedtick/syscalltick)", "stopped": True,
         "skipped_reads": 0, "why": "the target's len(allp) is 7, outside 0..1"},
        {"part": "P states sampled from memory (allp)", "stopped": False, "skipped_reads": 4,
         "why": "allp[0].m = 0xffffffffffffff00: refused a read"},
    ]
    text = " ".join("\n".join(runtime_lines(rv)).split())
    assert text.count("the target's len(allp) is 7") == 1, text
    assert "not available, their reader stopped (the target's len(allp) is 7, outside " \
        "0..1): goroutine count (allglen, free lists) per-P schedules" in text, text
    assert "P states sampled from memory (allp): 4 reads of the target's memory skipped, " \
        "the reader went on (first: allp[0].m = 0xffffffffffffff00: refused a read)" in text
    assert notes.stops == [("runtime counters' per-P ticks stopped: the target's len(allp) "
                            "is 7, outside 0..1", 14)]
    assert notes.skip_lines() == [("P sampler skipped what it could not read: 4 reads of the "
                                   "target's memory (first: allp[0].m = 0xffffffffffffff00: "
                                   "refused a read)", 14)]
