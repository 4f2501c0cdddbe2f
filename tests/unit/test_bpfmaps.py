"""BCC's JSON map type descriptions, decoded without BCC (gmpmon/capture/bpfmaps.py), give
the same layouts as BCC's own decoder. The descriptions are what BCC 0.26 wrote for
probes/gmpmon.bpf.c, samples.bpf.c and tracepoints.bpf.c (cache entries)."""

from __future__ import annotations

import ctypes as ct
import json
from typing import Any

import pytest

from gmpmon._bcc import bcc_version, import_bcc
from gmpmon.capture import bpfmaps
from gmpmon.errors import KernelSupportError

DESCS = [
    '"int"', '"unsigned int"', '"unsigned long long"',
    '["gm_lock", [["ts","unsigned long long"], ["addr","unsigned long long"], '
    '["stack","unsigned long long"] ], "struct_packed"]',
    '["gm_steal", [["thief","int"], ["victim","int"] ], "struct_packed"]',
    '["gm_stamp", [["ts","unsigned long long"], ["gen","unsigned int"], '
    '["reason","unsigned int"] ], "struct_packed"]',
    '["bpf_stacktrace", [["ip","unsigned long long", [127]] ], "struct_packed"]',
    '["gm_last", [["goid","unsigned long long"], ["p","int"], ["pstatus","unsigned int"] ],'
    ' "struct_packed"]',
    # a nested anonymous union and a bit field (BCC's own test shapes)
    '["t", [["a","char"], ["", [["x","int"], ["y","unsigned int"]], "union"], '
    '["f","unsigned int", 3] ], "struct"]',
]


def _layout(t: Any) -> Any:
    if not hasattr(t, "_fields_"):
        return (ct.sizeof(t), ct.alignment(t))
    return (ct.sizeof(t), [(f[0], getattr(t, f[0]).offset, getattr(t, f[0]).size)
                           for f in t._fields_])


@pytest.mark.parametrize("desc", DESCS)
def test_layouts_match_bccs(desc: str) -> None:
    bcc = import_bcc()
    theirs = bcc.BPF._decode_table_type(json.loads(desc))
    ours = bpfmaps.decode_type(json.loads(desc))
    assert _layout(ours) == _layout(theirs)


def test_unknown_types_are_refused() -> None:
    with pytest.raises(KernelSupportError):
        bpfmaps.decode_type("struct nothing")
    with pytest.raises(KernelSupportError):
        bpfmaps.decode_type(["t", [["a", "int", "enum"]], "struct"])


def test_bcc_version_without_importing_it() -> None:
    assert bcc_version() == import_bcc().__version__
