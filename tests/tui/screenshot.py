"""Capture docs/screenshot.svg (and .png) from the real app attached to a live Go program.

    GOMAXPROCS=8 ./demo &      # a private copy of build("demo"): uprobes live on the inode
    sudo .venv/bin/python -m tests.tui.screenshot $! --size 112x30 -o docs/screenshot.svg

The app runs headless (Textual's test driver) on a real LiveSession, so the picture is what a
terminal of that size shows. The PNG is made with rsvg-convert (Debian: librsvg2-bin), which
ignores SVG ``textLength`` and collapses leading no-break spaces: the SVG it is handed places
every character at its own x, so columns line up as in the terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import re
import shutil
import subprocess
import time
from pathlib import Path

from gmpmon.binary import load_pid
from gmpmon.session import LiveSession
from gmpmon.tui.app import make_app

_TEXT = re.compile(
    r'<text([^>]*?) x="([0-9.]+)"([^>]*?) textLength="([0-9.]+)"([^>]*)>([^<]*)</text>'
)


def per_char_svg(svg: str) -> str:
    """The same picture with one <text> per character at its own x (for rsvg)."""

    def split(m: re.Match[str]) -> str:
        pre, x, mid, length, post, content = m.groups()
        chars = html.unescape(content)
        if not chars:
            return ""
        w = float(length) / len(chars)
        return "".join(
            f'<text{pre} x="{float(x) + i * w:.1f}"{mid}{post}>{html.escape(ch)}</text>'
            for i, ch in enumerate(chars)
            if ch not in " \u00a0"
        )

    return _TEXT.sub(split, svg)


def to_png(svg_path: str) -> str | None:
    if shutil.which("rsvg-convert") is None:
        return None
    src = Path(svg_path)
    tmp = src.with_suffix(".rsvg.svg")
    png = src.with_suffix(".png")
    tmp.write_text(per_char_svg(src.read_text()))
    try:
        subprocess.run(["rsvg-convert", str(tmp), "-o", str(png)], check=True)
    finally:
        tmp.unlink()
    return str(png)


async def shoot(session: LiveSession, keys: list[str], size: tuple[int, int], out: str) -> None:
    app = make_app(session)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.5)
        await pilot.pause(1.0)  # the footer's keys are drawn after the first refreshes
        app.save_screenshot(out)
        await pilot.press("q")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pid", type=int)
    ap.add_argument("--mode", default="default")
    ap.add_argument("--after", type=float, default=8.0, help="seconds of capture first")
    ap.add_argument("--key", action="append", default=[], help="keys to press before")
    ap.add_argument("--size", default="100x30")
    ap.add_argument("-o", "--output", default="docs/screenshot.svg")
    args = ap.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    session = LiveSession(load_pid(args.pid), args.pid, mode=args.mode)
    session.start()
    try:
        time.sleep(args.after)
        asyncio.run(shoot(session, args.key, (cols, rows), args.output))
    finally:
        session.close()
    print(args.output)
    png = to_png(args.output)
    if png:
        print(png)


if __name__ == "__main__":
    main()
