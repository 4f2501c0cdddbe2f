"""Run many `gmpmon` command lines, each in its own forked process, from one interpreter
that has imported gmpmon once: what a fuzz loop of hundreds of real CLI runs needs to stay
within CI time (a fresh `python -m gmpmon` costs ~0.5-1 s here, a fork ~10 ms).

    prlimit --as=1000000000 python -m tests.hostile_forkrun < cases.json > results.json

stdin: a JSON list of argv lists (without "gmpmon"). stdout: a JSON list of {code, out, err,
seconds, max_rss_mb, cpu_s}, one per case. Each child runs gmpmon.cli.main (what `python -m gmpmon`
runs) with its stdout and stderr in files, under the limits this process was started with
(an rlimit is inherited); an exception that escapes main is printed as Python would (a
traceback) and exits 1, so the caller sees it."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
import traceback


def _child(argv: list[str], out_fd: int, err_fd: int) -> None:
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    code = 1
    try:
        from gmpmon import cli

        code = cli.main(argv)
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 2
    except BaseException:
        traceback.print_exc()
    finally:
        for s in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream: nothing more to say
                s.flush()
        os._exit(code)


def run_all(cases: list[list[str]], timeout: float = 30.0) -> list[dict[str, object]]:
    # Imported once, before the forks.
    import gmpmon.cli
    import gmpmon.commands.export
    import gmpmon.commands.replay
    import gmpmon.model  # noqa: F401

    results = []
    for argv in cases:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            t0 = time.monotonic()
            pid = os.fork()
            if pid == 0:
                _child(argv, out.fileno(), err.fileno())
            deadline = t0 + timeout
            while True:
                got, status, ru = os.wait4(pid, os.WNOHANG)
                if got:
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, 9)
                    got, status, ru = os.wait4(pid, 0)
                    break
                time.sleep(0.005)
            took = time.monotonic() - t0
            out.seek(0)
            err.seek(0)
            results.append({
                "argv": argv, "code": os.waitstatus_to_exitcode(status),
                "out": out.read().decode("utf-8", "replace")[-20000:],
                "err": err.read().decode("utf-8", "replace")[-20000:],
                "seconds": took, "max_rss_mb": ru.ru_maxrss / 1024,
                "cpu_s": ru.ru_utime + ru.ru_stime,
            })
    return results


if __name__ == "__main__":
    json.dump(run_all(json.load(sys.stdin)), sys.stdout)
