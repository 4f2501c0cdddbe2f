"""scripts/test, the README's test command: a run that collects no tests must fail."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.geteuid() != 0, reason="scripts/test runs scripts/setup, which needs root")
def test_no_tests_collected_is_a_failure() -> None:
    r = subprocess.run(
        [str(REPO / "scripts" / "test"), "tests/unit/test_doctor.py", "-k", "no_such_test_zz"],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "== pytest: FAILED: no tests were collected (exit 5)" in r.stdout
    assert "test: FAILED:" in r.stdout and "pytest" in r.stdout.splitlines()[-1]
    assert "== ruff" in r.stdout and "== mypy" in r.stdout  # lint runs in the test command
