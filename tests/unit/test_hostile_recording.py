"""Hostile recordings, built by the test from the committed ones (tests/data/*.gmp): bombs
(a 16M-event batch in half a megabyte; 500 KB holding as many events as the caps allow, of
the kinds the model spends most on; a payload that inflates 1000x; stacks tables of nested
lists, of millions of strings, of too many ids), header fields of the wrong type, and the
TUI's entry. The fuzz loop is test_hostile_recording_fuzz.py.

Every run is a real `gmpmon` under `prlimit --as=1000000000` and ends within LIMIT_S and
LIMIT_MB (tests/hostile.py), with exit 0 (a recording read in part: the good batches are used,
one note says where it stopped, and the report and summary say so too) or 9 (RecordingError:
one line), and never a traceback."""

from __future__ import annotations

import json
import os
import pty
import random
import re
import select
import struct
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gmpmon import errors
from gmpmon.events import Kind
from gmpmon.recformat import MAX_EVENTS_PER_BYTE, MAX_STACK_IDS, MAX_STACK_STRINGS
from tests import perfetto_trace
from tests.hostile import REPO
from tests.hostile_recordings import (
    DATA,
    check,
    dense_recording,
    forkrun,
    frame,
    good_frames,
    header_json,
    many_frames_recording,
    recording,
    run_one,
    zeros_bomb,
)

EXIT = errors.RecordingError.exit_code


# --- bombs -------------------------------------------------------------------------------


def test_sixteen_million_event_batch_in_half_a_megabyte(tmp_path: Path) -> None:
    """The issue's bomb: it took 2.6 GB and 14.5 s, and died of MemoryError under 2 GB."""
    n = 16 << 20
    path = tmp_path / "bomb16m.gmp"
    path.write_bytes(recording(header_json(DATA / "gc.gmp"), [frame(zeros_bomb(32 * n, n), n)]))
    assert path.stat().st_size < 600_000
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda a: run_one(path, *a), [
            ("replay", "--no-tui"), ("export", "--format", "perfetto", "-o", str(tmp_path / "p"))
        ]))
    for r in runs:
        line = check(r)
        assert r.code == EXIT, r.err
        assert "implausible batch size" in line, line
        print(f"\n16M-event batch ({path.stat().st_size:,} B): {r.figure()}\n  {line}")


DENSE = {
    "cpu-samples": (int(Kind.CPU_SAMPLE),),  # the costliest kind per event (~3 µs)
    "lost": (int(Kind.LOST),),  # each one resets the model's state
    "scheduling": tuple(int(k) for k in (Kind.EXECUTE, Kind.PARK, Kind.READY, Kind.STW_END,
                                         Kind.HANDOFF, Kind.GO_CREATE, Kind.STEAL)),
}


def test_half_a_megabyte_holds_no_more_events_than_its_size_allows(tmp_path: Path) -> None:
    """514 KB whose batches each stay under the per-batch caps but together hold 1.5M events
    of the kinds the model spends most on, or 70M events (the same 1 KB batch 490 times:
    over 100 s and 1 GB before the file-wide caps): the reader uses what the file's size
    allows (2 events a byte), says where it stopped, and replay and every export of the rest
    stay within the limits."""
    cases = []
    for name, kinds in DENSE.items():
        path = tmp_path / f"dense-{name}.gmp"
        path.write_bytes(dense_recording(kinds, 514_000))
        cases.append((path, "replay", "--no-tui"))
        cases.append((path, "export", "--format", "perfetto", "-o",
                      str(tmp_path / f"{name}.pftrace")))
    many = tmp_path / "many-frames.gmp"
    many.write_bytes(many_frames_recording(514_000))
    cases.append((many, "replay", "--no-tui"))
    cases.append((path, "replay", "--summary-json", str(tmp_path / "s.json"), "--interval", "1"))
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda c: run_one(*c), cases))
    for (path, *args), r in zip(cases, runs, strict=True):
        line = check(r)
        assert r.code == 0, r.err
        assert f"events past what the file's size allows ({MAX_EVENTS_PER_BYTE} a byte)" in r.err
        assert line.startswith("gmpmon: wrote") if args[0] == "export" else "replayed" in line
        if args[:2] == ["replay", "--no-tui"]:
            assert r.out.startswith("gmpmon: pid") and "recording read in part" in r.out
        print(f"\n{path.name}: {r.figure()}")
    perfetto = perfetto_trace.read((tmp_path / "scheduling.pftrace").read_bytes())
    assert len(perfetto.slices) + len(perfetto.instants) > 100_000
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["events"]["total"] > 500_000
    assert "events past what the file's size allows" in summary["recording"]["error"]


def test_bomb_after_good_batches_uses_them_and_says_where(tmp_path: Path) -> None:
    n = 1_000  # claims few events, but its payload inflates ~1000x, to 16 MB
    path = tmp_path / "ratio.gmp"
    good = good_frames(DATA / "gc.gmp")
    path.write_bytes(recording(header_json(DATA / "gc.gmp"),
                               [*good, frame(zeros_bomb(16 << 20, n), n)]))
    r = run_one(path, "replay", "--no-tui")
    line = check(r)
    assert r.code == 0 and "inflates past what the file's size allows" in line, line
    assert f"the {len(good)} good batches" in line, line
    assert "recording read in part" in r.out
    print(f"\ninflating batch after {len(good)} good ones: {r.figure()}\n  {line}")


def _stacks_frame(table: bytes) -> bytes:
    raw = struct.pack("<I", 0) + struct.pack("<I", len(table)) + table
    return frame(zlib.compress(raw, 9), 0)


def test_stacks_tables_that_would_take_gigabytes(tmp_path: Path) -> None:
    """After good batches: a table nested 200,000 deep; 16 MiB of two-letter frames (280 MB
    as Python strings); and, over many batches, more stack ids than capture ever names."""
    good = good_frames(DATA / "gc.gmp")
    many = b'{"1":[' + b",".join([b'"ab"'] * (MAX_STACK_STRINGS + 1)) + b"]}"
    ids = [_stacks_frame(json.dumps({str(i): ["f"] for i in range(j, j + 50_000)}).encode())
           for j in range(0, MAX_STACK_IDS + 50_000, 50_000)]
    cases = {
        "nested": ([_stacks_frame(b"[" * 200_000 + b"]" * 200_000)], "maximum recursion"),
        "strings": ([_stacks_frame(many)], f"more than {MAX_STACK_STRINGS} strings"),
        "ids": (ids, f"stack ids defined past {MAX_STACK_IDS}"),
    }
    paths = []
    for name, (frames, _) in cases.items():
        paths.append(tmp_path / f"{name}.gmp")
        # Padded: so that the file's size lets it inflate that far (an attacker would).
        paths[-1].write_bytes(recording(header_json(DATA / "gc.gmp"), [*good, *frames])
                              + random.Random(1).randbytes(300_000))
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda p: run_one(p, "replay", "--no-tui"), paths))
    for (name, (_, want)), r in zip(cases.items(), runs, strict=True):
        line = check(r)
        assert r.code == 0 and want in line, (name, line)
        print(f"\nstacks {name}: {r.figure()}")


HEADER_CASES = [
    ("g_status", 7), ("wait_reasons", "x"), ("p_status", [1, 2]), ("gomaxprocs", 10**12),
    ("gomaxprocs", True), ("wall_start", "now"), ("sample_hz", 1.5), ("exe", None),
    ("features", {"a": 1}), ("start_ns", 1 << 70), ("duty_window_ms", []),
    ("wall_start", 1e400), ("stw_reasons", [["nested"]]), ("pid", -(1 << 64)),
]


def test_header_of_the_wrong_type_is_one_line(tmp_path: Path) -> None:
    """g_status as an integer used to end in "TypeError: object of type 'int' has no len()"."""
    cases = []
    frames = good_frames(DATA / "gc.gmp")[:3]
    for i, (field, value) in enumerate(HEADER_CASES):
        h = header_json(DATA / "gc.gmp")
        h[field] = value
        path = tmp_path / f"header{i}.gmp"
        path.write_bytes(recording(json.dumps(h).replace("Infinity", "1e400").encode(), frames))
        cases.append(["replay", str(path), "--no-tui"] if i % 2 else
                     ["export", str(path), "--format", "json", "-o", str(tmp_path / f"{i}.json")])
    big = header_json(DATA / "gc.gmp")
    big["wait_reasons"] = ["x" * 100] * 20_000  # 2 MB of header
    (tmp_path / "big.gmp").write_bytes(recording(big, frames))
    cases.append(["replay", str(tmp_path / "big.gmp"), "--no-tui"])
    for (field, _), r in zip([*HEADER_CASES, ("size", 0)], forkrun(cases), strict=True):
        line = check(r)
        assert r.code == EXIT, (field, r.err)
        assert "corrupt recording header" in line and field in line, line


# --- the TUI's entry ----------------------------------------------------------------------


def _tui(path: Path, quit_when: bytes = b"", timeout: float = 30) -> tuple[int, str, float]:
    """`gmpmon replay FILE` on a terminal (a pty for stdin, stdout and stderr, where Textual
    draws): the TUI's entry. Once the screen shows ``quit_when``, `q`. -> (exit code, what
    the terminal got after the TUI left it, seconds)."""
    master, slave = pty.openpty()
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "gmpmon", "replay", str(path)], stdin=slave,
                         stdout=slave, stderr=slave, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO), TERM="xterm-256color"))
    os.close(slave)
    screen = b""
    sent = 0.0
    try:
        while time.monotonic() - t0 < timeout:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every end of the terminal closed
                    break
                if not data:
                    break
                screen += data
            elif p.poll() is not None:
                break
            # Again each second: a key sent before the app reads its terminal is lost.
            if quit_when and quit_when in screen and time.monotonic() - sent > 1:
                os.write(master, b"q")
                sent = time.monotonic()
        code = p.wait(timeout=5)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    text = screen.decode("utf-8", "replace")
    if quit_when:  # what came after the TUI gave the screen back (the alternate screen)
        text = text.rsplit("\x1b[?1049l", 1)[-1]
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1b[=>]", "", text).replace("\r", "")
    return code, text, time.monotonic() - t0


def test_tui_entry_says_malformed_recordings_in_one_line(tmp_path: Path) -> None:
    h = header_json(DATA / "gc.gmp")
    good = good_frames(DATA / "gc.gmp")
    bad_header = dict(h, g_status=7)
    first_bad = good[0][:-1] + bytes([good[0][-1] ^ 1])
    (tmp_path / "header.gmp").write_bytes(recording(bad_header, good))
    (tmp_path / "first.gmp").write_bytes(recording(h, [first_bad, *good[1:]]))
    cut = recording(h, good)
    (tmp_path / "cut.gmp").write_bytes(cut[: len(cut) - len(good[-1]) // 2])
    for name, want in (("header", "header field g_status"), ("first", "no good batch")):
        code, out, took = _tui(tmp_path / f"{name}.gmp")
        assert "Traceback" not in out and code == EXIT, (name, code, out)
        lines = out.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gmpmon: ") and want in out, out
    code, out, took = _tui(tmp_path / "cut.gmp", quit_when=b"replay")
    assert "Traceback" not in out and code == 0, (code, out)
    lines = out.strip().splitlines()
    assert lines[-1].startswith("gmpmon: ") and "good batches before it" in lines[-1], out
    print(f"\nTUI on a cut recording, q: {took:.1f} s, {lines[-1]}")
