"""gmpmon.binary against independent truths, over the Go version x build mode matrix.

Truths: the same toolchain's `go version` and `go tool nm`; binutils' `readelf` DWARF dump;
the toolchain's own runtime sources (the waitReason/stwReason const blocks and string
arrays); capstone for re-decoding probe sites. Stripped builds are compared with their
default-build twin (same code, same addresses: checked by test_stripped_twin_same_code).
"""

from __future__ import annotations

import atexit
import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import capstone
import pytest

from gmpmon.binary import BinaryInfo, load, to_json
from gmpmon.binary import probes as probes_mod
from gmpmon.binary.elf import Elf
from gmpmon.binary.load import GLOBALS
from gmpmon.binary.table import table_for
from tests import gotargets

WORKLOAD = "mutex"  # 2.5 MB, links sync.Mutex contention: every probe role is present

MATRIX = gotargets.matrix()
IDS = [f"go{v}-{m}" for v, m in MATRIX]


SNAPSHOTS = Path(tempfile.mkdtemp(prefix="gmpmon-test-binary-"))
atexit.register(shutil.rmtree, SNAPSHOTS, True)


@functools.cache
def binary(version: str, mode: str) -> Path:
    """A private copy of the build: every truth in this module reads the very same bytes,
    even if the workload is rebuilt meanwhile (its sources changed under a long run)."""
    out = SNAPSHOTS / f"go{version}-{mode}"
    shutil.copy2(gotargets.build(WORKLOAD, go=version, mode=mode), out)
    return out


@functools.cache
def info(version: str, mode: str) -> BinaryInfo:
    return load(str(binary(version, mode)))


def go_env() -> dict[str, str]:
    return gotargets._go_env()


def run_go(version: str, *args: str) -> str:
    go = gotargets.ensure_go(version)
    r = subprocess.run([str(go), *args], capture_output=True, text=True, env=go_env(), check=True)
    return r.stdout


@functools.cache
def nm(version: str, mode: str) -> dict[str, tuple[int, int]]:
    """name -> (address, size) from `go tool nm -size` of the same toolchain."""
    out = run_go(version, "tool", "nm", "-size", str(binary(version, mode)))
    syms: dict[str, tuple[int, int]] = {}
    for line in out.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and parts[2] not in ("U",):
            syms.setdefault(parts[3], (int(parts[0], 16), int(parts[1])))
    return syms


def has_symtab(mode: str) -> bool:
    return mode != "stripped"


def has_dwarf(mode: str) -> bool:
    return mode in ("default", "pie")


def twin(mode: str) -> str:
    """The build with .symtab/DWARF whose code equals this mode's (pie has its own code)."""
    return "pie" if mode == "pie" else "default"


# -- truths from the toolchain's sources --------------------------------------------------------


@functools.cache
def goroot(version: str) -> Path:
    return Path(run_go(version, "env", "GOROOT").strip())


def source_strings(version: str, array: str) -> list[str] | None:
    """The runtime's `var <array> = [...]string{K: "s", ...}` in const (iota) order."""
    rt = goroot(version) / "src" / "runtime"
    for f in sorted(rt.glob("*.go")):
        text = f.read_text()
        m = re.search(rf"var {array} = \[\.\.\.\]string\{{(.*?)\n\}}", text, re.S)
        if not m:
            continue
        values = dict(re.findall(r"^\s*(\w+):\s*\"([^\"]*)\",", m.group(1), re.M))
        first = next(iter(values))
        pattern = rf"^\s*{first}(\s+\w+)?\s*=\s*iota.*?\n\)"
        cm = next(
            (
                c
                for g in sorted(rt.glob("*.go"))
                if (c := re.search(pattern, g.read_text(), re.S | re.M))
            ),
            None,
        )
        assert cm, f"const block of {first} not found in {rt}"
        order: list[str] = []
        for line in cm.group(0).splitlines():
            lm = re.match(r"^\s*(\w+)\b(.*)$", line)
            if not lm:
                continue
            if order and "=" in lm.group(2).split("//")[0]:
                break  # the iota run ended (e.g. _Gscan = 0x1000)
            order.append(lm.group(1))
        return [values.get(name, "") for name in order]
    return None


# -- truth from binutils' DWARF dump ---------------------------------------------------------------


@functools.cache
def readelf_dies(path: Path) -> dict[int, tuple[str, dict[str, str], list[int]]]:
    """offset -> (tag, attributes, child offsets), from `readelf --debug-dump=info`."""
    out = subprocess.run(
        ["readelf", "--debug-dump=info", "-W", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    dies: dict[int, tuple[str, dict[str, str], list[int]]] = {}
    stack: list[int] = []
    head = re.compile(r"^\s*<(\d+)><([0-9a-f]+)>: Abbrev Number: (\d+)(?: \((\w+)\))?")
    attr = re.compile(r"^\s*<[0-9a-f]+>\s+(DW_AT_\w+)\s*:\s*(.*)$")
    cur: dict[str, str] | None = None
    for line in out.splitlines():
        m = head.match(line)
        if m:
            depth, off, abbrev, tag = int(m.group(1)), int(m.group(2), 16), m.group(3), m.group(4)
            if abbrev == "0":
                cur = None
                continue
            del stack[depth:]
            cur = {}
            dies[off] = (tag or "", cur, [])
            if stack:
                dies[stack[-1]][2].append(off)
            stack.append(off)
            continue
        if cur is not None:
            a = attr.match(line)
            if a:
                cur[a.group(1)] = a.group(2)
    return dies


def _val(s: str) -> str:
    return re.sub(r"^\(\w+\)\s*", "", s).strip()


def type_of(
    dies: dict[int, tuple[str, dict[str, str], list[int]]], attrs: dict[str, str]
) -> int | None:
    """The DIE a DW_AT_type points at, through typedefs."""
    ref = re.search(r"<0x([0-9a-f]+)>", attrs.get("DW_AT_type", ""))
    die = int(ref.group(1), 16) if ref else None
    while die is not None and dies[die][0] == "DW_TAG_typedef":
        ref = re.search(r"<0x([0-9a-f]+)>", dies[die][1].get("DW_AT_type", ""))
        die = int(ref.group(1), 16) if ref else None
    return die


@functools.cache
def struct_index(path: Path) -> dict[str, int]:
    return {
        _val(a.get("DW_AT_name", "")): off
        for off, (tag, a, _c) in readelf_dies(path).items()
        if tag == "DW_TAG_structure_type"
    }


def dwarf_truth(path: Path, struct: str, field_path: str) -> int | None:
    dies = readelf_dies(path)
    die = struct_index(path).get(struct)
    off_total = 0
    for part in field_path.split("."):
        if die is None:
            return None
        members = {_val(dies[c][1].get("DW_AT_name", "")): c for c in dies[die][2]}
        if part not in members:
            return None
        mem = dies[members[part]][1]
        off_total += int(_val(mem["DW_AT_data_member_location"]).split()[0])
        die = type_of(dies, mem)
    # an atomic wrapper: descend into its single named value field
    while die is not None and "atomic." in _val(dies[die][1].get("DW_AT_name", "")):
        inner = [c for c in dies[die][2] if _val(dies[c][1].get("DW_AT_name", "")) != "_"]
        if not inner:
            break
        mem = dies[inner[0]][1]
        off_total += int(_val(mem["DW_AT_data_member_location"]).split()[0])
        die = type_of(dies, mem)
    return off_total


# -- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_go_version_matches_go_version_command(version: str, mode: str) -> None:
    out = run_go(version, "version", str(binary(version, mode)))
    assert info(version, mode).go_version == out.split(": ", 1)[1].split()[0]
    assert info(version, mode).go_minor == int(version.split(".")[1])
    assert info(version, mode).arch == "amd64"
    assert info(version, mode).pie == (mode == "pie")
    assert info(version, mode).stripped == (not has_symtab(mode))
    assert info(version, mode).dwarf == has_dwarf(mode)
    assert info(version, mode).offsets_source == ("dwarf" if has_dwarf(mode) else "table")


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_symbols_equal_go_tool_nm(version: str, mode: str) -> None:
    i = info(version, mode)
    truth = nm(version, mode if has_symtab(mode) else twin(mode))
    assert i.symbols, "no symbols resolved"
    for name, addr in i.symbols.items():
        if name not in truth and not has_symtab(mode):
            name = name + ".abi0"
        assert name in truth, f"{name} not in go tool nm"
        assert addr == truth[name][0], f"{name}: {addr:#x} != nm {truth[name][0]:#x}"
        size = i.symbol_sizes[name.removesuffix(".abi0") if name not in i.symbol_sizes else name]
        if has_symtab(mode):
            assert size == truth[name][1], name
        else:
            # pclntab sizes run to the next function, padding included
            assert 0 <= size - truth[name][1] < 64, name
    if has_symtab(mode):
        assert {g for g in GLOBALS if g in truth} <= set(i.symbols)
    for role in probes_mod.REQUIRED_ROLES:
        assert role.name in i.probe_sites


@pytest.mark.parametrize("version", gotargets.versions())
def test_stripped_twin_same_code(version: str) -> None:
    """pclntab of the -s -w build lists the same functions at the same addresses as .symtab
    of the default build (names without .abi0), so stripped builds can be checked by twin."""
    full, bare = info(version, "default").functab, info(version, "stripped").functab

    def norm(ft: Any) -> dict[int, str]:
        # pclntab drops ".abi0" and keeps the "·" that .symtab spells "."
        return {
            s: n.removesuffix(".abi0").replace("·", ".")
            for s, n in zip(ft.starts, ft.names, strict=True)
        }

    pcln, symtab = norm(bare), norm(full)
    assert set(pcln) <= set(symtab), sorted(set(pcln) - set(symtab))[:5]
    # generic instantiations are "[...]" in pclntab, spelled out in .symtab
    differ = {a: (n, symtab[a]) for a, n in pcln.items() if n != symtab[a] and "[...]" not in n}
    assert not differ, list(differ.values())[:5]
    assert len(set(symtab) - set(pcln)) < 0.02 * len(symtab)


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_offsets_equal_dwarf_truth(version: str, mode: str) -> None:
    i = info(version, mode)
    truth_bin = binary(version, mode if has_dwarf(mode) else twin(mode))
    for key, value in i.offsets.items():
        struct, _, field = key.partition(".")[2].partition(".")
        struct = "runtime." + struct
        t = dwarf_truth(truth_bin, struct, field)
        if key == "runtime.schedt.runqsize" and t is None:
            t = dwarf_truth(truth_bin, struct, "runq.size")  # Go 1.25+
        if t is None and ".cpuStats.gc" in key:  # Go 1.25+: GCAssistTime, published as gc...
            t = dwarf_truth(truth_bin, struct, field.replace("cpuStats.gc", "cpuStats.GC"))
        assert t == value, f"{key}: {value} != readelf {t}"
    wanted = [
        "runtime.g.goid",
        "runtime.g.m",
        "runtime.g.atomicstatus",
        "runtime.g.waitreason",
        "runtime.m.id",
        "runtime.m.procid",
        "runtime.m.curg",
        "runtime.m.p",
        "runtime.p.id",
        "runtime.p.status",
        "runtime.p.runqhead",
        "runtime.p.runqtail",
        "runtime.p.runnext",
        "runtime.p.m",
        "runtime.p.schedtick",
        "runtime.schedt.npidle",
        "runtime.schedt.nmspinning",
        "runtime.schedt.runqsize",
    ]
    assert set(wanted) <= set(i.offsets)
    assert ("runtime.g.parentGoid" in i.offsets) == (i.go_minor >= 21)


@pytest.mark.parametrize("version", gotargets.versions())
def test_table_equals_dwarf_of_reference_build(version: str) -> None:
    """The committed table for this minor equals what DWARF says today (stale table = fail)."""
    entry = table_for(int(version.split(".")[1]))
    assert entry is not None, f"no table entry for {version}: run scripts/gen-offsets-table"
    ref = info(version, "default")
    assert entry["go_version"] == ref.go_version
    assert entry["offsets"] == ref.offsets
    assert entry["wait_reasons"] == list(ref.wait_reasons)
    assert entry["stw_reasons"] == list(ref.stw_reasons)


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_wait_and_stw_reasons_equal_runtime_source(version: str, mode: str) -> None:
    i = info(version, mode)
    assert list(i.wait_reasons) == source_strings(version, "waitReasonStrings")
    assert list(i.stw_reasons) == (source_strings(version, "stwReasonStrings") or [])
    gs = source_strings(version, "gStatusStrings")
    assert gs is not None
    # gStatusStrings leaves the unused states empty; gmpmon names them from runtime2.go
    assert [a for a, b in zip(i.g_status, gs, strict=False) if b] == [b for b in gs if b]


# go-runtime.md §3, verified independently on each toolchain when it was written.
DOC_WAIT_INDEX = {
    "sleep": {19: 19, 21: 19, 22: 19, 23: 19, 24: 19, 25: 20, 26: 14, 27: 14},
    "chan receive": {19: 14, 21: 14, 22: 14, 23: 14, 24: 14, 25: 14, 26: 19, 27: 19},
}


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_wait_reason_indexes_match_runtime_notes(version: str, mode: str) -> None:
    i = info(version, mode)
    for name, per_minor in DOC_WAIT_INDEX.items():
        assert i.wait_reasons.index(name) == per_minor[i.go_minor]


_CS = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


def decode_at(i: BinaryInfo, addr: int) -> tuple[str, bytes]:
    code = read_at(i, addr, 15)
    insn = next(_CS.disasm(code, addr, 1))
    return f"{insn.mnemonic} {insn.op_str}".strip(), bytes(insn.bytes)


@functools.cache
def binary_bytes(path: str) -> bytes:
    return Path(path).read_bytes()


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_probe_sites_decode_to_claimed_instructions(version: str, mode: str) -> None:
    i = info(version, mode)
    runqgrab = i.probe_sites["runtime.runqgrab"].entry
    for role, s in i.probe_sites.items():
        assert s.entry <= s.entry_site < s.entry + s.size, role
        text, raw = decode_at(i, s.entry_site)
        assert text == s.entry_insn, role
        assert probes_mod.is_emulated(raw) == s.entry_emulated, role
        if role in {r.name for r in probes_mod.REQUIRED_ROLES}:
            # every required role gets a cheap (emulated) site on every supported version
            assert s.entry_emulated, f"{role}: single-stepped entry {s.entry_insn}"
        if i.go_minor >= 21 and role != "runtime.asyncPreempt":
            assert s.entry_insn == "push rbp" or s.entry_insn.startswith("j"), role
        for r in s.rets:
            assert s.entry <= r < s.entry + s.size
            assert decode_at(i, r)[0] == "ret", role
        for callee, sites in s.call_results.items():
            assert callee == "runtime.runqgrab"
            assert sites, "no call result site"
            for a in sites:
                text, raw = decode_at(i, a)
                assert text.startswith("j") and text.split()[0] not in ("jmp",), text
                # walk back: a call to runqgrab lies within the 12 bytes before the jcc
                window = read_at(i, a - 16, 16)
                assert any(
                    ins.mnemonic == "call" and int(ins.op_str, 16) == runqgrab
                    for k in range(16)
                    for ins in _CS.disasm(window[k:], a - 16 + k)
                    if ins.address + ins.size <= a
                ), f"no call runqgrab before {a:#x}"
    rets = {r: len(s.rets) for r, s in i.probe_sites.items() if s.rets}
    assert rets["runtime.runqgrab"] >= 1 and rets["runtime.findRunnable"] >= 5


def read_at(i: BinaryInfo, addr: int, n: int) -> bytes:
    return Elf(binary_bytes(i.path), i.path).read_vaddr(addr, n)


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_missing_optional_is_explained(version: str, mode: str) -> None:
    i = info(version, mode)
    minor = i.go_minor
    assert ("runtime.gdestroy" in i.missing_optional) == (minor < 22)
    assert ("runtime.gopreempt_m" in i.missing_optional) == (minor >= 26)
    assert "mutex.lockSlow" in i.probe_sites
    want_mutex = "internal/sync.(*Mutex).lockSlow" if minor >= 24 else "sync.(*Mutex).lockSlow"
    assert i.probe_sites["mutex.lockSlow"].symbol == want_mutex
    assert "sample" not in i.missing_optional  # stripped too: globals found in the code
    assert i.probe_sites["runtime.asyncPreempt"].entry_insn == "push rbp"


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_json_has_the_documented_keys(version: str, mode: str) -> None:
    j = to_json(info(version, mode))
    for key in (
        "go_version",
        "arch",
        "pie",
        "stripped",
        "dwarf",
        "offsets_source",
        "symbols",
        "offsets",
        "wait_reasons",
        "probe_sites",
        "missing_optional",
        "call_results",
    ):
        assert key in j
    site = j["probe_sites"]["runtime.gopark"]
    assert set(site) >= {"entry", "entry_insn", "rets"}
    assert all(v.startswith("0x") for v in j["symbols"].values())
    assert j["call_results"]["runtime.runqsteal"]["runtime.runqgrab"]


def test_inspect_of_a_2mb_binary_is_fast() -> None:
    import time

    exe = gotargets.build("sleeper", go=gotargets.versions()[-1], mode="default")
    t = time.perf_counter()
    load(str(exe))
    elapsed = time.perf_counter() - t
    assert exe.stat().st_size < 4 << 20
    assert elapsed < 1.0, f"load took {elapsed:.2f} s"


@pytest.mark.parametrize("version", gotargets.versions())
def test_pclntab_abi_wrappers_resolve_to_the_body(version: str) -> None:
    """pclntab lists an ABI wrapper under its body's name. resolve() must pick the body: for a
    Go function the ABIInternal copy (its `.abi0` wrapper calls it), for an assembly function
    the `.abi0` copy (its ABIInternal wrapper calls it). Truth: the twin's .symtab names and
    `go tool objdump`, which shows which copy calls the other."""
    from gmpmon.binary.load import _Funcs

    stripped = binary(version, "stripped")
    funcs = _Funcs(Elf(binary_bytes(str(stripped)), str(stripped)))
    assert not funcs.from_symtab
    truth = nm(version, "default")
    dups = [
        n for n, c in funcs.by_name.items() if len(c) > 1 and n in truth and n + ".abi0" in truth
    ]
    assert len(dups) >= 5, dups
    regex = "^(" + "|".join(re.escape(n) for n in dups) + ")$"
    dump = run_go(version, "tool", "objdump", "-s", regex, str(binary(version, "default")))
    bodies = dump.split("\nTEXT ")
    for name in dups:
        text = next(b for b in bodies if b.removeprefix("TEXT ").startswith(name + "(SB)"))
        plain_is_wrapper = f"{name}.abi0(SB)" in text
        want = truth[name + ".abi0" if plain_is_wrapper else name][0]
        got = funcs.resolve(name)
        assert got is not None and got[0] == want, (name, plain_is_wrapper)


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_readers_only_load_reads_the_same_numbers_without_probe_sites(version: str,
                                                                       mode: str) -> None:
    """`gmpmon ps` loads binaries for the memory readers only: no probe sites, the struct
    offsets from the table of this Go minor instead of DWARF. Every offset and global it
    gives is the one the full load gives (DWARF where the build has it)."""
    from gmpmon.binary.load import load_elf

    full = info(version, mode)
    path = binary(version, mode)
    lite = load_elf(path.read_bytes(), str(path), readers_only=True)
    assert lite.probe_sites == {}
    assert lite.globals == full.globals
    assert lite.go_version == full.go_version and lite.dwarf == full.dwarf
    assert lite.wait_reasons == full.wait_reasons and lite.g_status == full.g_status
    for key, off in lite.offsets.items():
        if key in full.offsets:
            assert off == full.offsets[key], (key, off, full.offsets[key])
    assert set(full.offsets) <= set(lite.offsets), set(full.offsets) - set(lite.offsets)
