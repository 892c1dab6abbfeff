"""What the test runs of one machine keep between runs (~/.cache/lakecleaner-tests): the JVM class
archive (jvm_archive) and a migrated Airflow metadata database (airflow_template). Each is made by
one process at a time, under a lock, and used by every run after it."""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


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
