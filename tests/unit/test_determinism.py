"""The same recording gives the same bytes in two processes with different hash seeds.

Live == replay holds by construction (the recording and the model get the same Batch
objects); what must also hold is that nothing depends on set/dict iteration order of
strings, which PYTHONHASHSEED changes from one process to the next. Each export format of a
few recordings is produced in two `gmpmon export` processes and compared byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data"
FORMATS = ("json", "folded", "perfetto", "pprof")


def export(rec: Path, fmt: str, out: Path, seed: str, *extra: str) -> bytes:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    r = subprocess.run(
        [sys.executable, "-m", "gmpmon", "export", str(rec), "--format", fmt, "-o", str(out),
         *extra],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


@pytest.mark.parametrize("name", ["demo-default", "mutex", "sleeper"])
def test_exports_are_byte_identical_across_hash_seeds(name: str, tmp_path: Path) -> None:
    rec = DATA / f"{name}.gmp"
    for fmt in FORMATS:
        a = export(rec, fmt, tmp_path / f"a.{fmt}", "1")
        b = export(rec, fmt, tmp_path / f"b.{fmt}", "4242")
        assert a == b, f"{name} {fmt}: bytes differ between PYTHONHASHSEED=1 and 4242"
        assert a or fmt == "folded"
    a = export(rec, "folded", tmp_path / "a.lat", "7", "--what", "latency")
    b = export(rec, "folded", tmp_path / "b.lat", "99", "--what", "latency")
    assert a == b
