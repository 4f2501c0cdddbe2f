"""The skip allow-list (tests/skiplist.py, tests/skip-allowlist.txt), on real pytest runs.

Each case runs pytest in a subprocess on a small test file, with this suite's own conftest
loaded as a plugin (the hooks under test) and an allow-list of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.skiplist import DEFAULT_PATH, AllowListError, parse

REPO = Path(__file__).resolve().parents[2]

CASES = '''
import pytest

@pytest.mark.slow
def test_slow():
    pass

def test_listed():
    pytest.skip("no frobnicator here")

def test_listed_other_cause():
    pytest.skip("no widget here")

def test_unlisted():
    pytest.skip("kernel too old")

def test_runs():
    assert 1 + 1 == 2
'''

ALLOW = '''# comment
@slow | slow test: run with --full | takes minutes
cases/*::test_listed* | no frobnicator | frobnicators are rare
'''


def run(tmp_path: Path, strict: bool) -> tuple[int, str]:
    cases = tmp_path / "cases"
    cases.mkdir(exist_ok=True)
    (cases / "test_cases.py").write_text(CASES)
    allow = tmp_path / "allow.txt"
    allow.write_text(ALLOW)
    env = dict(os.environ, GMPMON_SKIP_ALLOWLIST=str(allow), PYTHONPATH=str(REPO))
    env.pop("GMPMON_FULL_MATRIX", None)
    env["GMPMON_REQUIRE_BPF"] = "1" if strict else ""
    r = subprocess.run(
        # The suite's own conftest as a plugin: the hooks under test are the ones CI runs.
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path),
         "--confcutdir", str(tmp_path), "-o", "addopts=", "-o", "markers=slow: slow",
         str(cases / "test_cases.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )
    return r.returncode, r.stdout + r.stderr


def test_in_ci_an_unlisted_skip_fails_and_listed_ones_are_printed(tmp_path: Path) -> None:
    rc, out = run(tmp_path, strict=True)
    assert rc == 1, out
    tail = out.splitlines()[-1]
    assert re.search(r"\b2 failed\b", tail) and re.search(r"\b1 passed\b", tail), tail
    assert re.search(r"\b2 skipped\b", tail), tail
    assert "FAILED cases/test_cases.py::test_unlisted" in out
    # listed pattern, but skipped for a cause the entry does not name
    assert "FAILED cases/test_cases.py::test_listed_other_cause" in out
    assert "skipped (kernel too old), and no entry of tests/skip-allowlist.txt allows it" in out
    summary = out.split("skips and the allow-list", 1)[1]
    assert "1 skipped, allowed by line 2 (@slow): takes minutes" in summary
    assert "    cases/test_cases.py::test_slow" in summary
    assert "1 skipped, allowed by line 3 (cases/*::test_listed*): frobnicators are rare" in summary
    assert "2 skipped, FAILED: not on the allow-list" in summary


def test_outside_ci_unlisted_skips_stay_skips_but_are_named(tmp_path: Path) -> None:
    rc, out = run(tmp_path, strict=False)
    assert rc == 0, out
    assert re.search(r"\b1 passed, 4 skipped\b", out.splitlines()[-1]), out
    assert "2 skipped, not on the allow-list: each would fail in CI" in out
    assert "    cases/test_cases.py::test_unlisted: kernel too old" in out


def test_the_suites_allow_list_parses_and_every_entry_has_a_reason() -> None:
    entries = parse(DEFAULT_PATH.read_text())
    assert entries, "tests/skip-allowlist.txt lists nothing"
    assert any(e.pattern == "@slow" for e in entries)
    for e in entries:
        assert len(e.reason.split()) >= 3, f"line {e.line}: a reason, not a word: {e.reason!r}"


def test_a_malformed_line_names_its_number() -> None:
    with pytest.raises(AllowListError, match=r"allow.txt:2: want 'PATTERN \| MESSAGE \| REASON'"):
        parse("# ok\ntests/x.py | no reason\n", "allow.txt")
