"""BinaryInfo.globals against `go tool nm` of the same toolchain, over the version x mode matrix.

A stripped (-s -w) build has no names for its globals; gmpmon finds them in the code. The
truth for it is the .symtab of the same program built without -s -w (test_binary's twin).
"""

from __future__ import annotations

import pytest

from gmpmon.binary.globals import ALIASES, GLOBAL_NAMES
from tests.unit.test_binary import IDS, MATRIX, has_symtab, info, nm


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_symtab_globals_equal_go_tool_nm(version: str, mode: str) -> None:
    if not has_symtab(mode):
        pytest.skip("no .symtab: see the finder tests")
    i = info(version, mode)
    truth = nm(version, mode)
    for g in GLOBAL_NAMES:
        names = [n for n in (g, *ALIASES.get(g, ())) if n in truth]
        if not names:
            assert g not in i.globals, f"{g} found but go tool nm has no such symbol"
            continue
        assert g in i.globals, f"{g} in go tool nm but not found"
        assert i.globals[g] == truth[names[0]][0], g
        assert i.global_sizes[g] == truth[names[0]][1], g
        assert i.global_how[g].startswith("symtab"), i.global_how[g]
    for g in ("runtime.allp", "runtime.allgs", "runtime.allglen", "runtime.allm",
              "runtime.sched", "runtime.gomaxprocs", "runtime.ncpu"):
        assert g in i.globals, f"{g} missing in go{version} {mode}"
