"""The BPF compiler process: BCC compiles one object and answers with its ObjSpec.

    python -m gmpmon.capture.bpfcompile   (stdin: {"text": base64, "flags": [...], "fd": N})

gmpmon/capture/bpfobj.py runs it on a cache miss, so that libbcc, LLVM and clang (~53 MB of
mapped pages, and ~100 MB of compiler heap that glibc keeps) live only as long as one
compile. The answer, on fd N: the spec as a cache entry's JSON, {"uncacheable": why} for an
object the loader cannot redo, or {"error": BCC's message}. BCC writes its diagnostics to
fds 1 and 2, which are the parent's (its captured_output folds them into one line).
"""

from __future__ import annotations

import base64
import json
import os
import sys


def main() -> int:
    req = json.loads(sys.stdin.buffer.read())
    out = os.fdopen(int(req["fd"]), "w")
    from gmpmon._bcc import import_bcc
    from gmpmon.capture.bpfobj import extract, to_json

    try:
        bcc = import_bcc()
        compiled = bcc.BPF(text=base64.b64decode(req["text"]), cflags=list(req["flags"]))
    except Exception as e:  # BCC raises bare Exceptions for compile failures
        answer: dict[str, object] = {"error": (str(e).splitlines() or [repr(e)])[0]}
    else:
        try:
            answer = to_json(extract(compiled, bcc.lib))
        except ValueError as e:
            answer = {"uncacheable": str(e)}
        compiled.cleanup()
    with out:
        out.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
