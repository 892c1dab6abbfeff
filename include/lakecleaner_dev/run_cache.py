"""What the test runs of one machine keep between runs (~/.cache/lakecleaner-tests): the JVM class
archive (jvm_archive) and a migrated Airflow metadata database (airflow_template). Each is made by
one process at a time, under a lock, and used by every run after it."""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Callable


class NotMade(Exception):
    """A cache entry's maker failed; the message says why (nothing was kept)."""


def cache_dir() -> Path:
    """Where they are kept (each under a key of what it was made from; old ones stay)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lakecleaner-tests"


@contextlib.contextmanager
def making(cache: Path, name: str = ".making"):
    """Held while one process looks for an entry and makes it if missing: a second one waits and then
    finds it made (flock: released by the kernel if its holder dies)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def entry(cache: Path, name: str, make: Callable[[Path], None], lock: str = ".making") -> Path:
    """The cache's file ``name``, made first by ``make(part)`` if missing: under the lock ``lock``
    (another process making it is waited for), into a file of this process's own that is renamed
    into place once made, whole or not at all, for a run looking at the same cache meanwhile. A
    ``make`` that raises, or leaves nothing, keeps nothing (NotMade, or its own exception)."""
    target = cache / name
    with making(cache, lock):
        if not target.exists():
            part = target.with_name(f".{name}.{os.getpid()}")
            try:
                make(part)
                if not part.exists():
                    raise NotMade(f"{name}: its maker left no file")
            except BaseException:
                part.unlink(missing_ok=True)
                raise
            os.replace(part, target)
    return target
