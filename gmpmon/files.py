"""Creating output files safely: 0600, never through a symlink, checked before any work.

Every file gmpmon writes goes through here (recordings, exports, the TUI's snapshots of
stacks): the layer below everything that writes files.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import BinaryIO

from gmpmon.errors import OutputPathError


def check_output_path(path: str) -> None:
    """Fail early (before attaching or exporting) if ``path`` cannot be written safely."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise OutputPathError(f"{path}: directory {parent} does not exist") from None
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OutputPathError(f"{path}: directory {parent} is not writable") from None
        return
    except OSError as e:
        raise OutputPathError(f"{path}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputPathError(f"{path}: is a symbolic link; refusing to write through it")
    if not stat.S_ISREG(st.st_mode):
        raise OutputPathError(f"{path}: exists and is not a regular file")
    if not os.access(path, os.W_OK):
        raise OutputPathError(f"{path}: not writable")


def open_private(path: str) -> BinaryIO:
    """Create ``path`` mode 0600 (replacing a regular file), refusing symlinks. Unbuffered."""
    check_output_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(2):
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            # A regular file (checked above): replace it, but never follow a link that a
            # racing process put there in the meantime (O_EXCL|O_NOFOLLOW on the retry).
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                raise OutputPathError(f"{path}: is not a regular file; refusing to write") from None
            os.unlink(path)
            continue
        except OSError as e:
            raise OutputPathError(f"{path}: {e.strerror}") from None
        return os.fdopen(fd, "wb", buffering=0)
    raise OutputPathError(f"{path}: keeps reappearing; refusing to write")


def open_new_private(path: str) -> BinaryIO:
    """Create ``path`` mode 0600 only if no name is there, not even a dangling symlink
    (O_EXCL|O_NOFOLLOW): nothing is replaced or written through. Unbuffered. Raises
    FileExistsError when the name exists, OutputPathError for any other refusal."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except FileExistsError:
        raise
    except OSError as e:
        raise OutputPathError(f"{path}: {e.strerror}") from None
    return os.fdopen(fd, "wb", buffering=0)


def unique_path(directory: Path, stem: str, suffix: str) -> Path:
    """``directory/stem-YYYYmmdd-HHMMSS[-n]suffix`` that does not exist yet."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = directory / f"{stem}-{stamp}{suffix}"
    n = 1
    while path.exists():
        path = directory / f"{stem}-{stamp}-{n}{suffix}"
        n += 1
    return path


def write_new_private(directory: Path, stem: str, suffix: str, data: bytes) -> Path:
    """Write ``data`` to a new file (unique_path) readable by its owner only (stacks can
    name internals); never replaces anything."""
    while True:
        path = unique_path(directory, stem, suffix)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        except OSError as e:
            raise OutputPathError(f"{path}: {e.strerror}") from None
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path


# --- gmpmon's cache (the layout cache of `ps`, compiled BPF objects) -----------------------

CACHE_ENV = "GMPMON_CACHE_DIR"


def cache_root() -> str | None:
    """Where gmpmon's caches live (None: off): /var/cache/gmpmon for root, else
    $XDG_CACHE_HOME/gmpmon; ``$GMPMON_CACHE_DIR`` overrides, empty turns them off."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return env or None
    if os.geteuid() == 0:
        return "/var/cache/gmpmon"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gmpmon")


def private_dir(path: str) -> str | None:
    """Why ``path`` must not be used, or None when it is ours alone (made if absent)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None
