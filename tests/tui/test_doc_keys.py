"""Every key the README and docs/tui.md name exists in the TUI's bindings (issue 27: the
README said `t` switches targets; it is `T`).

The keys are read from the README's paragraphs that name TUI keys (the one with "Keys:" and
those saying "in the TUI") and from docs/tui.md's key table (its first column); the bindings
from every Textual class the TUI defines, with what they inherit (Textual's own scrolling
keys included).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import gmpmon.tui
import gmpmon.tui.widgets

ROOT = Path(__file__).parents[2]
# How the docs spell a key -> Textual's key name.
SPELLED = {"↑": "up", "↓": "down", "←": "left", "→": "right", "PgUp": "pageup",
           "PgDn": "pagedown", "+": "plus", "-": "minus", "[": "left_square_bracket",
           "]": "right_square_bracket", "<": "less_than_sign", ">": "greater_than_sign",
           "?": "question_mark", "!": "exclamation_mark", "/": "slash"}
NAMED = {"enter", "tab", "shift+tab", "space", "home", "end", "escape", "ctrl+c", "ctrl+b",
         "ctrl+f"}


def bindings() -> dict[str, set[str]]:
    """Key -> the actions bound to it anywhere in the TUI."""
    out: dict[str, set[str]] = {}
    mods = [gmpmon.tui, gmpmon.tui.widgets]
    for pkg in (gmpmon.tui, gmpmon.tui.widgets):
        for m in pkgutil.iter_modules(pkg.__path__):
            mods.append(importlib.import_module(f"{pkg.__name__}.{m.name}"))
    for mod in mods:
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            for base in cls.__mro__:
                for b in base.__dict__.get("BINDINGS", ()):
                    spec, action = (b.key, b.action) if hasattr(b, "key") else (b[0], b[1])
                    for k in spec.split(","):
                        out.setdefault(k.strip(), set()).add(action)
    return out


def bound_keys() -> set[str]:
    return set(bindings())


def key_tokens(text: str) -> set[str]:
    """The backticked tokens of ``text`` that are keys (a range `1`-`5` gives each)."""
    text = re.sub(r"`(\d)`-`(\d)`", lambda m: " ".join(
        f"`{i}`" for i in range(int(m[1]), int(m[2]) + 1)), text)
    out = set()
    for tok in re.findall(r"`([^`]+)`", text):
        if tok in SPELLED:
            out.add(SPELLED[tok])
        elif len(tok) == 1 or tok in NAMED:
            out.add(tok)
    return out


def readme_keys() -> set[str]:
    paras = (ROOT / "README.md").read_text().split("\n\n")
    keys: set[str] = set()
    for p in paras:
        if "Keys:" in p:
            keys |= key_tokens(p)
        for m in re.finditer(r"in\s+the\s+TUI\s+((?:`[^`]+`[ ,/]*)+)", p):
            keys |= key_tokens(m[1])
    return keys


def tui_doc_keys() -> set[str]:
    keys: set[str] = set()
    for line in (ROOT / "docs" / "tui.md").read_text().splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 2 and not re.search(r"[▁░─·▚]", cells[0]):
            keys |= key_tokens(cells[0])
    return keys


def test_every_key_the_readme_names_is_bound() -> None:
    keys = readme_keys()
    assert {"T", "w", "enter", "slash", "1", "5", "q", "question_mark"} <= keys, keys
    missing = keys - bound_keys()
    assert not missing, f"README names keys the TUI does not bind: {sorted(missing)}"


def test_every_key_in_the_tui_doc_table_is_bound() -> None:
    keys = tui_doc_keys()
    assert {"t", "z", "s", "up", "pagedown", "less_than_sign", "ctrl+c"} <= keys, keys
    missing = keys - bound_keys()
    assert not missing, f"docs/tui.md names keys the TUI does not bind: {sorted(missing)}"


def test_the_readmes_target_switch_key_picks_a_target() -> None:
    """Bound is not enough: `t` is bound (recent / cumulative), but not to the target picker."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"`([^`]+)`\s+switches\s+between\s+targets", text)
    assert m, "the README no longer says which key switches targets"
    assert "pick_target" in bindings().get(m[1], set()), (m[1], bindings().get(m[1]))
