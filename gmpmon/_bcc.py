"""The one place that imports BCC. Debian's python3-bpfcc lives outside any venv."""

from __future__ import annotations

import sys
from types import ModuleType

from gmpmon.errors import KernelSupportError

DIST_PACKAGES = "/usr/lib/python3/dist-packages"


def import_bcc() -> ModuleType:
    try:
        import bcc
    except ImportError:
        if DIST_PACKAGES not in sys.path:
            sys.path.append(DIST_PACKAGES)  # appended: the venv's own packages still win
        try:
            import bcc
        except ImportError as e:
            raise KernelSupportError(
                "BCC is not importable", hint="apt-get install python3-bpfcc"
            ) from e
    module: ModuleType = bcc  # typed here: mypy sees the untyped bcc as Any
    return module
