"""The cleaner's own state per table: consecutive failures and the uncleanable mark (Kafka KIP-346's
"uncleanable partitions"), kept next to the warehouse so it survives restarts of anything.

One small JSON document per table, written through pyiceberg's FileIO (local disk or an object
store alike). Only one job runs per table at a time (the DAG guarantees it), so a document has
one writer.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from .config import LakecleanerConfig


@dataclass
class TableState:
    consecutive_failures: int = 0
    last_error: str | None = None
    last_failure_ms: int | None = None
    last_success_ms: int | None = None
    uncleanable: bool = False
    marked_at_ms: int | None = None
    last_orphan_cleanup_ms: int | None = None


class StateStore:
    def __init__(self, cfg: LakecleanerConfig):
        self.root = cfg.state_root
        self.base = self.root + "/state"
        from pyiceberg.io import load_file_io

        self.io = load_file_io(cfg.catalog.pyiceberg_properties_resolved(), self.base)

    def _path(self, table: str) -> str:
        return f"{self.base}/{table}.json"

    def get(self, table: str) -> TableState:
        inp = self.io.new_input(self._path(table))
        if not inp.exists():
            return TableState()
        with inp.open() as fh:
            return TableState(**json.loads(fh.read()))

    def put(self, table: str, state: TableState) -> None:
        with self.io.new_output(self._path(table)).create(overwrite=True) as fh:
            fh.write(json.dumps(asdict(state), sort_keys=True).encode())

    def record_success(self, table: str, now_ms: int | None = None) -> TableState:
        state = self.get(table)
        state.consecutive_failures, state.last_success_ms = 0, now_ms or int(time.time() * 1000)
        self.put(table, state)
        return state

    def record_failure(self, table: str, error: str, mark_after: int, now_ms: int | None = None) -> TableState:
        """Count a failed run; the mark_after-th failure in a row marks the table uncleanable."""
        state = self.get(table)
        now_ms = now_ms or int(time.time() * 1000)
        state.consecutive_failures += 1
        state.last_error, state.last_failure_ms = error[:2000], now_ms
        if state.consecutive_failures >= mark_after and not state.uncleanable:
            state.uncleanable, state.marked_at_ms = True, now_ms
        self.put(table, state)
        return state

    def clear(self, table: str) -> TableState:
        """An operator's word that the table is fixed: evaluate it again."""
        state = self.get(table)
        state.uncleanable, state.consecutive_failures, state.marked_at_ms = False, 0, None
        self.put(table, state)
        return state

    def uncleanable_reason(self, table: str) -> str | None:
        state = self.get(table)
        if not state.uncleanable:
            return None
        return (f"uncleanable after {state.consecutive_failures} failed runs in a row; last error: {state.last_error}; "
                f"clear with: lakecleaner clear-uncleanable {table}")


# ---------------------------------------------------------------- documents under the state root
def _local_path(location: str) -> str | None:
    if location.startswith("file:"):
        return location[len("file:"):].removeprefix("//")
    return None if "://" in location else location


def write_document(cfg: LakecleanerConfig, name: str, document: dict) -> str:
    """Write a JSON document under the cleaner's state root: on a local disk under a temporary name
    renamed into place, so a reader (or a writer killed midway) never leaves a half-written file;
    elsewhere through pyiceberg's FileIO (an object store's put is atomic). Returns its location."""
    import os
    import tempfile

    location = f"{cfg.state_root}/{name}"
    data = json.dumps(document, sort_keys=True, default=str).encode()
    local = _local_path(location)
    if local is not None:
        os.makedirs(os.path.dirname(local), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(local), prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, local)
        return location
    from pyiceberg.io import load_file_io

    io = load_file_io(cfg.catalog.pyiceberg_properties_resolved(), location)
    with io.new_output(location).create(overwrite=True) as fh:
        fh.write(data)
    return location


def read_document(cfg: LakecleanerConfig, name: str) -> dict | None:
    """A document written by ``write_document``; None if there is none."""
    from pyiceberg.io import load_file_io

    location = f"{cfg.state_root}/{name}"
    inp = load_file_io(cfg.catalog.pyiceberg_properties_resolved(), location).new_input(location)
    if not inp.exists():
        return None
    with inp.open() as fh:
        return json.loads(fh.read())
