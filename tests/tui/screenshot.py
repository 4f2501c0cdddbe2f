"""Capture docs/screenshot.svg from the real app attached to a live Go program (needs root).

    sudo .venv/bin/python -m tests.tui.screenshot PID [--mode default] [--after 8] \
        [--key 1] [--size 100x30] [-o docs/screenshot.svg]

The app runs headless (Textual's test driver) on a real LiveSession, so the picture is what a
terminal of that size shows; `rsvg-convert docs/screenshot.svg -o docs/screenshot.png` makes
the PNG.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from gmpmon.binary import load_pid
from gmpmon.session import LiveSession
from gmpmon.tui.app import make_app


async def shoot(session: LiveSession, keys: list[str], size: tuple[int, int], out: str) -> None:
    app = make_app(session)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.5)
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


if __name__ == "__main__":
    main()
