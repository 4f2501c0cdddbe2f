"""The probe table (gmpmon/probetable.py) against the BPF C and its header.

Parses probes/gmpmon.h and probes/gmpmon.bpf.c and fails when they disagree with the Python:
handler ids and the switch / GM_PROBE list, the event kinds each handler emits, the GM_*
numbers against events.Kind / Counter / LockKind, and (compiled with the host's C compiler)
GM_COUNTER_KEY against decode_counter_key and gm_lat_bucket against events.lat_bucket.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gmpmon import probetable
from gmpmon.capture.bpfprog import decode_counter_key
from gmpmon.events import (
    KIND_RANGES,
    LAT_SUB,
    LOST_IN_BAND,
    YIELD_GOSCHED,
    YIELD_HANDOFF,
    YIELD_PREEMPT,
    Counter,
    Kind,
    LockKind,
    lat_bucket,
)
from gmpmon.probetable import PROBES

REPO = Path(__file__).resolve().parents[2]
HEADER = (REPO / "probes" / "gmpmon.h").read_text()
BPF_C = (REPO / "probes" / "gmpmon.bpf.c").read_text()


def defines(prefix: str) -> dict[str, int]:
    """#define <prefix>NAME <int> in gmpmon.h."""
    return {
        m[1]: int(m[2])
        for m in re.finditer(rf"^#define {prefix}([A-Z0-9_]+)\s+(\d+)\s*(?:/\*.*\*/)?\s*$",
                             HEADER, re.M)
    }


def functions(src: str) -> dict[str, str]:
    """name -> body of every top-level C function (bodies end at a '}' in column 0)."""
    out = {}
    for m in re.finditer(r"^(?:static __always_inline )?\w[\w ]*?\b(\w+)\(([^)]*)\)\s*\n\{",
                         src, re.M):
        end = src.index("\n}", m.end())
        out[m[1]] = src[m.end() : end]
    return out


FUNCS = functions(BPF_C)
# gm_emit(GM_KIND, ...) or gm_emit_at(ts, GM_KIND, ...)
EMIT = re.compile(r"gm_emit(?:\(|_at\(\s*\w+\s*,)\s*GM_([A-Z_]+)")


def emitted_kinds(fn: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """GM_<KIND> names passed to gm_emit by `fn` and the functions it calls."""
    body = FUNCS[fn]
    kinds = set(EMIT.findall(body))
    for callee in set(re.findall(r"\b(\w+)\(", body)) & set(FUNCS) - seen - {fn}:
        kinds |= emitted_kinds(callee, seen | {fn})
    return kinds


def test_handler_ids_are_unique_dense_and_fit_the_hits_array() -> None:
    hids = sorted(p.hid for p in PROBES)
    assert hids == list(range(len(PROBES)))
    assert len({p.handler for p in PROBES}) == len(PROBES)
    m = re.search(r"BPF_PERCPU_ARRAY\(hits, u64, (\d+)\)", BPF_C)
    assert m is not None and len(PROBES) <= int(m[1])
    assert tuple(p.handler for p in sorted(PROBES, key=lambda p: p.hid)) == probetable.HANDLERS


def test_the_uprobe_multi_switch_is_the_table() -> None:
    body = FUNCS["gmpmon_probe"]
    cases = re.findall(r"case H_([A-Z0-9_]+): return on_(\w+)\(ctx\);", body)
    assert len(cases) == body.count("case "), "a case of another shape"
    assert sorted(cases) == sorted((p.handler.upper(), p.handler) for p in PROBES)


def test_the_perf_fallback_list_is_the_table() -> None:
    probes = re.findall(r"^GM_PROBE\((\w+), H_([A-Z0-9_]+)\)$", BPF_C, re.M)
    assert sorted(probes) == sorted((p.handler, p.handler.upper()) for p in PROBES)


def test_every_handler_emits_the_kinds_its_row_says() -> None:
    for p in PROBES:
        assert f"on_{p.handler}" in FUNCS, f"no on_{p.handler} in gmpmon.bpf.c"
        got = emitted_kinds(f"on_{p.handler}")
        assert got == {k.name for k in p.kinds}, p.handler


def test_header_kinds_are_events_kind() -> None:
    kinds = {k: v for k, v in defines("GM_").items() if not k.startswith(("C_", "LOCK_", "YIELD_"))}
    kinds.pop("LAT_SUB")
    # every probe-range kind, plus those of other ranges that probes emit (WAKE)
    probe_kinds = {k.name: k.value for k in Kind if k.value in KIND_RANGES["probe"]}
    probe_kinds |= {k.name: k.value for p in PROBES for k in p.kinds}
    probe_kinds["LOST"] = Kind.LOST.value  # the in-band mark gm_emit_at writes after a loss
    assert kinds == probe_kinds
    assert defines("LOST_")["IN_BAND"] == LOST_IN_BAND
    # and the C uses no GM_<KIND> the header lacks
    used = set(EMIT.findall(BPF_C))
    assert used <= set(kinds)


def test_header_counters_and_lock_kinds_are_the_python_enums() -> None:
    counters = defines("GM_C_")
    assert counters and all(Counter[k].value == v for k, v in counters.items())
    assert set(re.findall(r"gm_count(?:_windowed)?\(\s*GM_C_([A-Z_]+)", BPF_C)) <= set(counters)
    # the kernel's totals (issue 30): every one the model shows has its table
    assert {"GO_START", "GO_CREATE", "GO_EXIT", "SYS_ENTER", "SYS_EXIT", "HANDOFF", "YIELD",
            "PREEMPT_REQ", "STW", "STW_NS"} <= set(counters)
    assert defines("GM_YIELD_") == {"GOSCHED": YIELD_GOSCHED, "PREEMPT": YIELD_PREEMPT,
                                    "HANDOFF": YIELD_HANDOFF}
    assert defines("GM_LOCK_") == {k.name: k.value for k in LockKind}
    m = re.search(r"^#define GM_LAT_SUB (\d+)$", HEADER, re.M)
    assert m is not None and int(m[1]) == LAT_SUB


def test_roles_cover_every_probe_function() -> None:
    names = {r.name for r in probetable.ROLES}
    for p in PROBES:
        assert {f.name for f in p.funcs} <= names
        calls = (probetable.CALL, probetable.CALL_RESULT, probetable.LAST_CALL)
        assert p.site in (probetable.ENTRY, probetable.RETS, probetable.EXITS, *calls)
        assert (p.site in calls) == bool(p.callee)
        if p.fallback_for:
            assert p.fallback_for in probetable.BY_HANDLER


_C_MAIN = r"""
#include <stdio.h>
#include <stdint.h>
typedef uint64_t u64; typedef uint32_t u32; typedef int32_t s32; typedef int64_t s64;
#define __always_inline inline
#include "gmpmon.h"
int main(void) {
    unsigned long long t, k, ns; long long p;
    while (scanf("%llu %lld %llu %llu", &t, &p, &k, &ns) == 4)
        printf("%llu %u\n", (unsigned long long)GM_COUNTER_KEY(t, (s32)p, (u32)k),
               gm_lat_bucket(ns));
    return 0;
}
"""


def test_counter_key_and_latency_bucket_compiled_from_the_header(tmp_path: Path) -> None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler (scripts/setup installs gcc)")
    src = tmp_path / "t.c"
    src.write_text(_C_MAIN)
    exe = tmp_path / "t"
    subprocess.run([cc, "-O1", "-I", str(REPO / "probes"), "-o", str(exe), str(src)],
                   check=True, capture_output=True)
    cases = []
    for t in (1, 2, 6, 7, 12, 255):
        for p in (-1, 0, 1, 5, 1023, 0xFFFFFE):
            for k in (0, 1, 7 << 16 | 3, 0xFFFFFFFF):
                cases.append((t, p, k))
    nss = [0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 100, 1000, 12345, 10**9, (1 << 40) + 7,
           (1 << 63) - 1, (1 << 64) - 1]
    rows = [(t, p, k, nss[i % len(nss)]) for i, (t, p, k) in enumerate(cases)]
    rows += [(1, 0, 0, ns) for ns in nss] + [(1, 0, 0, 3 << s) for s in range(62)]
    out = subprocess.run([str(exe)], input="".join(f"{t} {p} {k} {ns}\n" for t, p, k, ns in rows),
                         capture_output=True, text=True, check=True).stdout.split("\n")
    for (t, p, k, ns), line in zip(rows, out, strict=False):
        key, bucket = (int(x) for x in line.split())
        assert decode_counter_key(key) == (t, p, k), (t, p, k)
        assert bucket == lat_bucket(ns), ns
    assert len(out) == len(rows) + 1


_C_COND = r"""
#include <stdio.h>
#include <stdint.h>
typedef uint64_t u64; typedef uint32_t u32; typedef int32_t s32; typedef int64_t s64;
#define __always_inline inline
#include "gmpmon.h"
/* SETcc for each condition code, after the same CMP: the CPU's own answer. */
#define SET(cc, name) __asm__ volatile("cmp %2, %1\n\t" "set" name " %0" \
                                       : "=q"(got[cc]) : "r"(a), "r"(b) : "cc")
int main(void) {
    long long a, b;
    while (scanf("%lld %lld", &a, &b) == 2) {
        unsigned char got[16];
        u64 flags;
        __asm__ volatile("cmp %2, %1\n\t" "pushfq\n\t" "popq %0"
                         : "=r"(flags) : "r"(a), "r"(b) : "cc");
        SET(0, "o"); SET(1, "no"); SET(2, "b"); SET(3, "ae"); SET(4, "e"); SET(5, "ne");
        SET(6, "be"); SET(7, "a"); SET(8, "s"); SET(9, "ns"); SET(10, "p"); SET(11, "np");
        SET(12, "l"); SET(13, "ge"); SET(14, "le"); SET(15, "g");
        for (int cc = 0; cc < 16; cc++)
            printf("%d%d", got[cc], gm_cond(flags, 0x10 | cc));
        printf(" %d\n", gm_cond(flags, 0) + gm_cond(flags, cc_none()));
    }
    return 0;
}
"""


def test_exit_condition_agrees_with_the_cpus_setcc(tmp_path: Path) -> None:
    """gm_cond (probes/gmpmon.h) on RFLAGS after a CMP against the CPU's SETcc after the same
    CMP, for all 16 condition codes: the exit probes' filter is what the jump would do."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler (scripts/setup installs gcc)")
    src = tmp_path / "c.c"
    src.write_text(_C_COND.replace("cc_none()", "0x0f"))
    exe = tmp_path / "c"
    subprocess.run([cc, "-O1", "-I", str(REPO / "probes"), "-o", str(exe), str(src)],
                   check=True, capture_output=True)
    vals = [0, 1, -1, 2, 0x7F, 0x80, 0xFF, (1 << 31) - 1, -(1 << 31), (1 << 63) - 1, -(1 << 63),
            3, -3, 1 << 40]
    pairs = [(a, b) for a in vals for b in vals]
    out = subprocess.run([str(exe)], input="".join(f"{a} {b}\n" for a, b in pairs),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == len(pairs)
    seen = set()
    for (a, b), line in zip(pairs, out, strict=True):
        bits, always = line.split()
        assert always == "2", (a, b)  # no condition bit: always fires
        for c in range(16):
            cpu, ours = bits[2 * c], bits[2 * c + 1]
            assert cpu == ours, f"cc {c:#x} after cmp {a}, {b}: cpu {cpu}, gm_cond {ours}"
            seen.add((c, cpu))
    assert len(seen) == 32  # every condition seen both true and false
