"""The pclntab unwinder's pieces on real binaries (pure: no process): moduledata.gofunc, the
inline tree, and the _func layouts of the 1.18-1.19 and 1.20+ pclntabs. The live unwind is
checked against Go's own dumps in tests/integration/test_goroutines.py."""

from __future__ import annotations

import pytest

from gmpmon.binary.elf import Elf
from gmpmon.binary.unwind import Unwinder, exported_runtime
from tests import gotargets

VERSIONS = ("1.19", "1.21", "1.27")


def unwinder(version: str, mode: str) -> tuple[Unwinder, Elf]:
    path = gotargets.build("stacks", go=version, mode=mode)
    elf = Elf(path.read_bytes(), str(path))
    return Unwinder(elf), elf


@pytest.mark.parametrize("version", VERSIONS)
def test_gofunc_is_the_go_func_symbol(version: str) -> None:
    uw, elf = unwinder(version, "default")
    syms = {s.name: s.value for s in elf.symbols() or []}
    want = syms.get("go:func.*", syms.get("go.func.*"))
    assert want is not None
    assert uw.gofunc() == want
    stripped, _ = unwinder(version, "stripped")
    assert stripped.gofunc() is not None


@pytest.mark.parametrize(("version", "mode"), [(v, m) for v in VERSIONS
                                               for m in ("default", "stripped", "pie")])
def test_inlined_calls_expand_as_go_prints_them(version: str, mode: str) -> None:
    uw, _elf = unwinder(version, mode)
    lt = uw.lines
    fo = next(lt.func_off + f for f in lt.funcs if uw.name(lt.func_off + f) == "main.recvLeaf")
    entry = uw.entry(fo)
    i = lt.funcs.index(fo - lt.func_off)
    end = uw.text + lt.entries[i + 1]
    chains = {tuple(f.func for f in uw.frames_at(fo, pc)) for pc in range(entry + 1, end)}
    assert ("main.recvInl", "main.recvOuter", "main.recvLeaf") in chains
    frames = next(uw.frames_at(fo, pc) for pc in range(entry + 1, end)
                  if len(uw.frames_at(fo, pc)) == 3)
    assert [f.inlined for f in frames] == [True, True, False]
    assert frames[0].offset is None and frames[2].offset == frames[2].pc - entry
    assert all(f.file.endswith("stacks/main.go") for f in frames)
    assert [f.line for f in frames[:2]] == [35, 37]  # the lines of <-c and recvInl(c)


def test_wrapper_id_is_the_last_funcid() -> None:
    for version in VERSIONS:
        uw, _ = unwinder(version, "stripped")
        assert uw.wrapper_id >= 20  # FuncIDWrapper: 21 in 1.19 ... 23 in 1.27


def test_exported_runtime() -> None:
    assert exported_runtime("runtime.Gosched")
    assert exported_runtime("runtime.(*Func).Name")
    assert not exported_runtime("runtime.gopark")
    assert not exported_runtime("runtime.(*mheap).alloc")
    assert not exported_runtime("main.Foo")
