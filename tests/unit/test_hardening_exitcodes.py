"""docs/exit-codes.md is true: its table matches gmpmon/errors.py, every error class has its
own code, and the CLI turns each into one `gmpmon: ...` line and that code."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from gmpmon import cli, errors

DOC = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`(\w+)`\s*\|")


def error_classes() -> dict[str, type[errors.GmpmonError]]:
    return {
        name: cls
        for name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.GmpmonError)
    }


def doc_table() -> dict[str, int]:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(2)] = int(m.group(1))
    return rows


def test_doc_table_matches_errors_py() -> None:
    classes = error_classes()
    assert len(classes) >= 10, classes  # an empty table on both sides would match too
    assert doc_table() == {name: cls.exit_code for name, cls in classes.items()}


def test_every_error_class_has_a_distinct_nonzero_code() -> None:
    codes = [cls.exit_code for cls in error_classes().values()]
    assert len(codes) >= 10, codes
    assert all(0 < c < 126 for c in codes)
    assert len(codes) == len(set(codes))


@pytest.mark.parametrize("name", sorted(error_classes()))
def test_cli_prints_one_line_and_exits_with_the_code(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cls = error_classes()[name]

    def fail(args: object) -> int:
        raise cls("something\nwent wrong", hint="the fix")

    import gmpmon.commands.replay as replay

    monkeypatch.setattr(replay, "run", fail)
    assert cli.main(["replay", "x.gmp"]) == cls.exit_code
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "gmpmon: something went wrong (the fix)\n"
