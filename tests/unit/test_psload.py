"""What makes `gmpmon ps` cheap gives the answers of the plain way, on every build.

- load_elf(functab=False): functions and globals looked up by name (binary/symindex.py)
  instead of a walk of every symbol: the same BinaryInfo but the function table;
- the finders' decoder, which asks capstone for details only where they can matter: the same
  refs and calls as the decoder that looks at everything (kept here, as it was);
- the on-disk layout cache (fleet/layoutcache.py): an entry gives back what was stored, for
  that very file only; anything damaged or foreign in it is a miss, never an error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

import capstone
import pytest
from capstone import x86

from gmpmon.binary import finders
from gmpmon.binary.elf import Elf
from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.load import _Funcs, load_elf
from gmpmon.fleet import layoutcache
from gmpmon.fleet.layoutcache import LayoutCache, file_id
from tests import gotargets
from tests.unit.test_binary import IDS, MATRIX, binary

FINDER_FUNCS = ("runtime.procresize", "runtime.osinit", "runtime.allgadd",
                "runtime.mcommoninit", "runtime.pidleput", "runtime.pidleget")


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_load_without_functab_equals_the_full_walk(version: str, mode: str) -> None:
    path = binary(version, mode)
    data = path.read_bytes()
    full = load_elf(data, str(path), readers_only=True)
    lite = load_elf(data, str(path), readers_only=True, functab=False)
    for f in dataclasses.fields(BinaryInfo):
        if f.name != "functab":
            assert getattr(lite, f.name) == getattr(full, f.name), f.name
    assert not lite.functab.loaded and full.functab.loaded and full.functab.names
    with pytest.raises(RuntimeError, match="without its function table"):
        lite.functab.lookup(full.functab.starts[0])


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_lookups_by_name_equal_the_full_walk(version: str, mode: str) -> None:
    """Every function name and every global of the binary, every function's first, second
    and last byte and the byte after it: the targeted lookups answer as the dicts do."""
    path = binary(version, mode)
    elf = Elf(path.read_bytes(), str(path))
    full, lite = _Funcs(elf), _Funcs(elf, table=False)
    assert lite.from_symtab == full.from_symtab
    assert len(full.by_name) > 1000
    for name, cands in full.by_name.items():
        assert lite.candidates(name) == cands, name
    for name in ("runtime.nosuchfunction", "untime.procresize", "runtime.procresiz"):
        assert lite.candidates(name) == []
    ft = full.functab
    for s, e in zip(ft.starts, ft.ends, strict=True):
        for pc in (s, s + 1, e - 1, e):
            assert lite.name_at(pc) == ft.lookup(pc), hex(pc)
    assert lite.name_at(ft.starts[0] - 1) is None
    walked = full.walked_globals  # the dict of every object symbol, by a walk
    assert bool(lite.globals) == bool(walked) == bool(full.globals)
    for name, hit in walked.items():
        assert lite.globals[name] == hit, name
    assert lite.globals.get("runtime.nosuchvariable") is None
    if walked:
        assert dict(lite.globals) == walked


def reference_decode(name: str, entry: int, code: bytes) -> finders.Decoded:
    """The decoder as it was before ps needed it fast: every detail of every instruction."""
    md = finders._MD
    insns = list(md.disasm(code, entry))
    targets: set[int] = set()
    for ins in insns:
        ops = ins.operands
        if ins.group(capstone.CS_GRP_JUMP) and ops and ops[0].type == x86.X86_OP_IMM:
            targets.add(ops[0].imm)
    regs: dict[str, tuple[str, int]] = {}
    refs: list[finders.Ref] = []
    calls: list[tuple[int, int]] = []
    for ins in insns:
        off = ins.address - entry
        if ins.address in targets:
            regs.clear()
        mn = ins.mnemonic.removeprefix("lock ")
        ops = ins.operands
        if ins.group(capstone.CS_GRP_CALL):
            if ops and ops[0].type == x86.X86_OP_IMM:
                calls.append((off, ops[0].imm))
            regs.clear()
            continue
        if ins.group(capstone.CS_GRP_JUMP) or ins.group(capstone.CS_GRP_RET):
            regs.clear()
            continue
        rip = [o for o in ops if o.type == x86.X86_OP_MEM and o.mem.base == x86.X86_REG_RIP]
        new: tuple[str, int] | None = None
        if rip:
            o = rip[0]
            target = ins.address + ins.size + o.mem.disp
            if mn == "lea":
                kind, new = "lea", ("addr", target)
            elif mn in ("mov", "movsxd", "movzx") and ops[0].type == x86.X86_OP_REG:
                kind, new = "load", ("load", target)
            elif mn == "mov":
                kind = "store"
            elif mn == "cmp":
                kind = "cmp"
            elif mn == "xchg":
                kind = "xchg"
            else:
                kind = "other"
            refs.append(finders.Ref(off, target, kind, 8 if mn == "lea" else o.size))
        elif mn in ("xchg", "xadd") and len(ops) == 2 and ops[0].type == x86.X86_OP_MEM:
            m = ops[0].mem
            base = finders._r64(md, m.base) if m.base else ""
            held = regs.get(base)
            if held and held[0] == "addr" and m.index == 0 and m.disp == 0:
                src = (regs.get(finders._r64(md, ops[1].reg))
                       if ops[1].type == x86.X86_OP_REG else None)
                refs.append(finders.Ref(off, held[1], mn, ops[0].size, src))
        elif mn == "mov" and len(ops) == 2 and ops[0].type == x86.X86_OP_REG and (
            ops[1].type == x86.X86_OP_IMM
        ):
            new = ("imm", ops[1].imm & 0xFFFFFFFF if ops[0].size == 4 else ops[1].imm)
        try:
            _read, written = ins.regs_access()
        except capstone.CsError:
            regs.clear()
            continue
        for w in written:
            regs.pop(finders._r64(md, w), None)
        if new is not None and ops and ops[0].type == x86.X86_OP_REG:
            regs[finders._r64(md, ops[0].reg)] = new
    return finders.Decoded(name, entry, tuple(refs), tuple(calls))


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_decoder_equals_the_one_that_looks_at_everything(version: str, mode: str) -> None:
    """The finders' functions on every build, and every runtime and sync function of the
    newest stripped build (~1,350: every shape of the tracker, branches, atomics, calls)."""
    path = binary(version, mode)
    elf = Elf(path.read_bytes(), str(path))
    funcs = _Funcs(elf)
    names: list[str] = list(FINDER_FUNCS)
    if version == gotargets.versions()[-1] and mode == "stripped":
        names += sorted(n for n in funcs.by_name if n.startswith(("runtime.", "sync.")))
    checked = 0
    for name in dict.fromkeys(names):
        for entry, size in funcs.by_name.get(name, []):
            if not 0 < size <= 1 << 16:
                continue
            code = elf.read_vaddr(entry, size)
            assert finders.decode(name, entry, code) == reference_decode(name, entry, code), name
            checked += 1
    assert checked >= len(FINDER_FUNCS)


# -- the on-disk cache --------------------------------------------------------------------


def _lite(version: str = "1.27", mode: str = "stripped") -> tuple[Path, BinaryInfo]:
    path = binary(version, mode)
    return path, load_elf(path.read_bytes(), str(path), readers_only=True, functab=False)


def _key(path: Path) -> tuple[int, int, int, int, int]:
    return file_id(os.stat(path))


SEGS = ((0, 0x400000, 4096), (4096, 0x401000, 8192))


def test_cache_gives_back_what_was_stored_for_that_file(tmp_path: Path) -> None:
    path, info = _lite()
    cache = LayoutCache(str(tmp_path / "c"))
    assert cache.enabled and cache.get(_key(path)) is None
    cache.put(_key(path), info, SEGS)
    got = LayoutCache(str(tmp_path / "c")).get(_key(path))
    assert got is not None and got.segments == SEGS
    for f in layoutcache.FIELDS:
        assert getattr(got.info, f) == getattr(info, f), f
    assert got.info.pid is None and got.info.load_bias == 0 and not got.info.functab.loaded
    assert os.stat(tmp_path / "c").st_mode & 0o777 == 0o700
    (entry,) = (tmp_path / "c").iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600
    # Another file, another gmpmon: misses.
    other, _ = _lite("1.27", "default")
    assert cache.get(_key(other)) is None
    assert layoutcache.decode(entry.read_bytes(), _key(path), "another-gmpmon") is None


def test_cache_misses_a_file_rewritten_in_place_even_with_its_old_mtime(tmp_path: Path) -> None:
    exe = tmp_path / "server"
    shutil.copy(binary("1.27", "stripped"), exe)
    _, info = _lite()
    cache = LayoutCache(str(tmp_path / "c"))
    before = os.stat(exe)
    cache.put(file_id(before), info, SEGS)
    assert cache.get(_key(exe)) is not None
    data = bytearray(exe.read_bytes())
    data[-1] ^= 0xFF  # same size, same inode
    with open(exe, "r+b") as f:
        f.write(data)
    os.utime(exe, ns=(before.st_atime_ns, before.st_mtime_ns))  # and its mtime put back
    after = os.stat(exe)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)
    assert cache.get(file_id(after)) is None


def _corruptions(raw: bytes) -> list[bytes]:
    doc = json.loads(raw)

    def edit(f: Any) -> bytes:
        d = json.loads(raw)
        f(d)
        return json.dumps(d).encode()

    return [
        b"", b"\0" * 100, raw[: len(raw) // 2], b"[]", b"null", b"{" * 100000,
        edit(lambda d: d.update(schema=99)),
        edit(lambda d: d["info"].update(offsets={"runtime.g.goid": "152"})),
        edit(lambda d: d["info"].update(globals={"runtime.sched": True})),
        edit(lambda d: d["info"].update(go_minor="27")),
        edit(lambda d: d["info"].update(wait_reasons="idle")),
        edit(lambda d: d["info"].pop("offsets")),
        edit(lambda d: d["info"].update(extra=1)),
        edit(lambda d: d.update(segments=[[1, 2]])),
        edit(lambda d: d.update(file=doc["file"][:4])),
        edit(lambda d: d.update(info=[])),
    ]


def test_a_corrupt_cache_entry_is_a_miss_and_is_rewritten(tmp_path: Path) -> None:
    path, info = _lite()
    d = tmp_path / "c"
    cache = LayoutCache(str(d))
    cache.put(_key(path), info, SEGS)
    (entry,) = d.iterdir()
    good = entry.read_bytes()
    for bad in _corruptions(good):
        entry.write_bytes(bad)
        assert LayoutCache(str(d)).get(_key(path)) is None, bad[:200]
    again = LayoutCache(str(d))
    again.put(_key(path), info, SEGS)
    assert again.get(_key(path)) is not None and entry.read_bytes() == good
    entry.unlink()
    entry.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_bytes(good)
    assert LayoutCache(str(d)).get(_key(path)) is None  # never through a symlink


def test_a_directory_others_can_write_is_not_used(tmp_path: Path) -> None:
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    cache = LayoutCache(str(d))
    assert not cache.enabled and "writable by others" in cache.off_reason
    path, info = _lite()
    cache.put(_key(path), info, SEGS)
    assert list(d.iterdir()) == []


def test_the_cache_keeps_the_most_recently_used_entries(tmp_path: Path) -> None:
    _, info = _lite()
    d = tmp_path / "c"
    cache = LayoutCache(str(d))
    keys = [(1, i, 2, 3, 4) for i in range(12)]
    for n, k in enumerate(keys):
        cache.put(k, info, SEGS)
        os.utime(cache._path(k), ns=(n * 10**9, n * 10**9))
    assert cache.get(keys[0]) is not None  # used now: the newest
    cache.prune(keep=5)
    kept = [k for k in keys if os.path.exists(cache._path(k))]
    assert kept == [keys[0], *keys[8:]]


def test_the_cache_directory_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(layoutcache.ENV_DIR, "")
    assert layoutcache.default_dir() is None and not LayoutCache().enabled
    monkeypatch.setenv(layoutcache.ENV_DIR, "/some/where")
    assert layoutcache.default_dir() == "/some/where"
    monkeypatch.delenv(layoutcache.ENV_DIR)
    if os.geteuid() == 0:
        assert layoutcache.default_dir() == "/var/cache/gmpmon"
    monkeypatch.setenv("GMPMON_OFFSETS_TABLE", "/no/such/table.json")
    assert layoutcache.code_digest() is None  # an override that cannot be read: no cache


def test_every_binaryinfo_field_is_cached_or_per_process() -> None:
    """A field added to BinaryInfo must be stored by the cache or be set per process, else a
    cached entry would silently give its default."""
    names = {f.name for f in dataclasses.fields(BinaryInfo)}
    assert names == set(layoutcache.FIELDS) | set(layoutcache._PER_PROCESS)
    assert not set(layoutcache.FIELDS) & set(layoutcache._PER_PROCESS)
