"""gmpmon's own CPU while a user watches each view (needs root, tmux, a running Go program).

    sudo .venv/bin/python -m tests.tui.measure_cpu PID [--mode default] [--seconds 15]
        [--kernel samples,sched,syscalls]

tmux runs `gmpmon attach PID` in a 100x30 terminal; for each view (and paused, which leaves
only capture and model) the keys are pressed and the CPU time of gmpmon's process (all its
threads, utime+stime from /proc/PID/stat) over --seconds is printed, 100 % = one core.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pid", type=int)
    ap.add_argument("--mode", default="default")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--kernel", default="", help="gmpmon's --kernel LIST (default: its own)")
    args = ap.parse_args()
    session = f"gmpmon-cpu-{uuid.uuid4().hex[:6]}"
    kernel = f" --kernel {args.kernel}" if args.kernel else ""
    cmd = (f"cd {REPO} && exec {sys.executable} -m gmpmon attach {args.pid} "
           f"--mode {args.mode}{kernel}")
    tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "30", cmd)
    try:
        gm = int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").split()[0])
        time.sleep(6)  # compile, attach, first snapshots
        for label, keys in (("Procs", ["1"]), ("Scheduling", ["2"]), ("Contention", ["3"]),
                            ("Goroutines", ["4"]), ("paused (capture + model only)", ["1", "p"])):
            for k in keys:
                tmux("send-keys", "-t", session, k)
            time.sleep(2)
            a = cpu_seconds(gm)
            time.sleep(args.seconds)
            b = cpu_seconds(gm)
            print(f"{label:32} {100 * (b - a) / args.seconds:5.1f} %", flush=True)
        tmux("send-keys", "-t", session, "q")
        time.sleep(2)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


if __name__ == "__main__":
    main()
