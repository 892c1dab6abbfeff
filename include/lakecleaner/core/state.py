"""The cleaner's own state per table: consecutive failures and the uncleanable mark (Kafka KIP-346's
"uncleanable partitions"), kept next to the warehouse so it survives restarts of anything.

Two small JSON documents per table, each with one kind of writer, so no writer's read-modify-write
can lose another's update:

- ``state/<table>.json``, the table's outcomes: written by the application cleaning the table (its
  runs' outcomes, maintenance's orphan sweep), or by the DAG when that application died. The DAG
  runs one application per table at a time.
- ``state/<table>.clear.json``, an operator's clear: how many failed runs it forgave.

Failures are a running count (never reset), so "consecutive" is derived when read: failed runs
since the last success or the last clear, whichever forgave more. Documents are written whole
under a temporary name and renamed into place (``write_document``); one that cannot be read is an
error naming the table, never a silent default.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass

from lakecleaner.core.config import IDENT, LakecleanerConfig

log = logging.getLogger(__name__)


@dataclass
class TableState:
    """A table's state as read: the outcomes document seen through the operator's last clear."""
    consecutive_failures: int = 0
    last_error: str | None = None
    last_failure_ms: int | None = None
    last_success_ms: int | None = None
    uncleanable: bool = False
    marked_at_ms: int | None = None
    last_orphan_cleanup_ms: int | None = None


@dataclass
class _Outcomes:
    """state/<table>.json (the cleaning application's document)."""
    failed_runs: int = 0  # every failed run ever: a running count
    failed_runs_at_success: int = 0  # failed_runs when the last run succeeded
    last_error: str | None = None
    last_failure_ms: int | None = None
    last_success_ms: int | None = None
    marked_at_ms: int | None = None  # when the consecutive failures last reached the mark
    last_orphan_cleanup_ms: int | None = None

    @classmethod
    def from_document(cls, doc: dict) -> "_Outcomes":
        if "consecutive_failures" in doc:  # written before the counts were split: one document
            doc = {"failed_runs": doc["consecutive_failures"], **{k: doc.get(k) for k in (
                "last_error", "last_failure_ms", "last_success_ms", "marked_at_ms", "last_orphan_cleanup_ms")}}
        out = cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})
        for name, value in vars(out).items():
            wanted = str if name == "last_error" else int
            if value is not None and (isinstance(value, bool) or not isinstance(value, wanted)):
                raise TypeError(f"{name}={value!r}")
        if out.failed_runs is None or out.failed_runs_at_success is None:
            raise TypeError("failed_runs missing")
        return out


class StateError(ValueError):
    """A state document exists but cannot be read."""


class StateStore:
    def __init__(self, cfg: LakecleanerConfig):
        self.cfg = cfg
        self.mark_after = cfg.cleaner.uncleanable_after_failures

    def _read(self, table: str, suffix: str) -> dict | None:
        name = f"state/{document_name(table, suffix)}"
        try:
            doc = read_document(self.cfg, name)
        except Exception as exc:  # noqa: BLE001 - named below, for this table only
            raise StateError(f"table {table}: cleaner state {self.cfg.state_root}/{name} is unreadable "
                             f"({type(exc).__name__}: {exc}); `lakecleaner clear-uncleanable {table}` rewrites it") from None
        if doc is not None and not isinstance(doc, dict):
            raise StateError(f"table {table}: cleaner state {self.cfg.state_root}/{name} is not a JSON object")
        return doc

    def _outcomes(self, table: str) -> _Outcomes:
        doc = self._read(table, "")
        try:
            return _Outcomes.from_document(doc or {})
        except (TypeError, KeyError) as exc:
            raise StateError(f"table {table}: cleaner state is not one this cleaner wrote ({exc})") from None

    def _forgiven(self, table: str) -> int:
        doc = self._read(table, ".clear") or {}
        value = doc.get("failed_runs_forgiven", 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise StateError(f"table {table}: cleaner state clear document holds {value!r}, not a count")
        return value

    def _view(self, o: _Outcomes, forgiven: int) -> TableState:
        consecutive = max(0, o.failed_runs - max(o.failed_runs_at_success, forgiven))
        uncleanable = consecutive >= self.mark_after
        return TableState(consecutive, o.last_error, o.last_failure_ms, o.last_success_ms, uncleanable,
                          o.marked_at_ms if uncleanable else None, o.last_orphan_cleanup_ms)

    def get(self, table: str) -> TableState:
        """Raises StateError when a document exists but cannot be read."""
        return self._view(self._outcomes(table), self._forgiven(table))

    def _outcomes_to_write(self, table: str) -> _Outcomes:
        """The outcomes document for a writer: an unreadable one is replaced, loudly (the failure
        count starts again; its runs are in the run history)."""
        try:
            return self._outcomes(table)
        except StateError as exc:
            log.error("lakecleaner: %s; replacing it", exc)
            return _Outcomes()

    def _write(self, table: str, outcomes: _Outcomes) -> None:
        from dataclasses import asdict

        write_document(self.cfg, f"state/{document_name(table)}", asdict(outcomes))

    def record_success(self, table: str, now_ms: int) -> TableState:
        o = self._outcomes_to_write(table)
        o.failed_runs_at_success = o.failed_runs
        o.last_success_ms = max(now_ms, o.last_success_ms or now_ms)  # a backfill's older interval end
        self._write(table, o)
        return self._view(o, self._forgiven_or_none(table))

    def record_failure(self, table: str, error: str, now_ms: int) -> TableState:
        """Count a failed run; the cleaner.uncleanable_after_failures-th in a row marks the table."""
        o = self._outcomes_to_write(table)
        forgiven = self._forgiven_or_none(table)
        o.failed_runs += 1
        o.last_error, o.last_failure_ms = error[:2000], now_ms
        view = self._view(o, forgiven)
        if view.consecutive_failures == self.mark_after or (view.uncleanable and o.marked_at_ms is None):
            o.marked_at_ms = now_ms
        self._write(table, o)
        return self._view(o, forgiven)

    def record_orphan_cleanup(self, table: str, now_ms: int) -> None:
        o = self._outcomes_to_write(table)
        o.last_orphan_cleanup_ms = now_ms
        self._write(table, o)

    def _forgiven_or_none(self, table: str) -> int:
        try:
            return self._forgiven(table)
        except StateError as exc:
            log.error("lakecleaner: %s; counting every failure", exc)
            return 0

    def clear(self, table: str) -> TableState:
        """An operator's word that the table is fixed: forgive every failure counted so far (an
        unreadable outcomes document is forgiven whole: kept beside, as move_aside names it, and
        started again, whatever it was: a directory in its place too)."""
        try:
            failed_runs = self._outcomes(table).failed_runs
        except StateError as exc:
            name = f"state/{document_name(table)}"
            kept = move_aside(self.cfg, name, int(time.time() * 1000))
            log.warning("lakecleaner: %s; kept as %s and started again", exc, kept)
            write_document(self.cfg, name, {})
            failed_runs = 0
        write_document(self.cfg, f"state/{document_name(table, '.clear')}", {"failed_runs_forgiven": failed_runs})
        return self.get(table)

    def uncleanable_reason(self, table: str) -> str | None:
        state = self.get(table)
        if not state.uncleanable:
            return None
        return (f"uncleanable after {state.consecutive_failures} failed runs in a row; last error: {state.last_error}; "
                f"clear with: lakecleaner clear-uncleanable {table}")


# ---------------------------------------------------------------- documents under the state root
NAME_MAX = 255  # bytes in a file name (ext4, XFS, APFS), whatever the path's length
CORRUPT_MARK = ".corrupt-"  # a document moved aside: <name>.corrupt-<epoch ms> (move_aside)
# A state document's name, short enough that its corrupt copy's name fits NAME_MAX too.
DOCUMENT_NAME_MAX = NAME_MAX - len(CORRUPT_MARK) - 13
SHORTENED_KEEP = 160  # characters of a shortened name kept readable before its hash


def document_name(table: str, suffix: str = "") -> str:
    """``namespace.table`` as a file name under the state root, checked: a name is never a path
    (no separators, no '..'), whoever supplied it. A name too long for a file (a table name near
    the limit) is shortened: a readable prefix and a hash of the table name. A shorter name is
    unchanged, so state written before still reads."""
    parts = table.split(".") if isinstance(table, str) else []
    if len(parts) != 2 or not all(IDENT.fullmatch(p) for p in parts):
        raise ValueError(f"table {table!r}: invalid table name: expected namespace.table, letters, digits and _ only")
    name = f"{table}{suffix}.json"
    return name if len(name) <= DOCUMENT_NAME_MAX else f"{shortened(table)}{suffix}.json"


def shortened(stem: str) -> str:
    """``stem`` as a name of at most SHORTENED_KEEP + 17 characters: its first characters, then a
    hash of all of it after '~' (in no table name or run id), so two long names never meet."""
    return f"{stem[:SHORTENED_KEEP]}~{hashlib.sha256(stem.encode()).hexdigest()[:16]}"


def _checked_name(name: str) -> str:
    """A document's name under the state root is a relative path that stays there: no empty, '.'
    or '..' component, no NUL, whoever built it (a --report argument among them)."""
    if not isinstance(name, str) or "\0" in name or any(p in ("", ".", "..") for p in name.split("/")):
        raise ValueError(f"document name {name!r}: not a relative path under the state root")
    return name


def local_path(location: str) -> str | None:
    if location.startswith("file:"):
        return location[len("file:"):].removeprefix("//")
    return None if "://" in location else location


def write_document(cfg: LakecleanerConfig, name: str, document: dict) -> str:
    """Write a JSON document under the cleaner's state root: on a local disk under a temporary name
    renamed into place, so a reader (or a writer killed midway) never leaves a half-written file;
    elsewhere through pyiceberg's FileIO (an object store's put is atomic). Returns its location."""
    import os
    import threading

    location = f"{cfg.state_root}/{_checked_name(name)}"
    data = json.dumps(document, sort_keys=True, default=str).encode()
    local = local_path(location)
    if local is not None:
        # The temporary name is unique per process and thread (the only possible concurrent writers
        # of one document; a thread writes one at a time, so a long name's first 200 characters
        # do); tempfile.mkstemp's random names cost more than the write itself.
        tmp = os.path.join(os.path.dirname(local),
                           f".tmp-{os.path.basename(local)[:200]}-{os.getpid()}-{threading.get_ident()}")
        try:
            fh = open(tmp, "wb")
        except FileNotFoundError:
            os.makedirs(os.path.dirname(local), exist_ok=True)
            fh = open(tmp, "wb")
        with fh:
            fh.write(data)
        os.replace(tmp, local)
        return location
    from pyiceberg.io import load_file_io

    io = load_file_io(cfg.catalog.pyiceberg_properties_resolved(), location)
    with io.new_output(location).create(overwrite=True) as fh:
        fh.write(data)
    return location


def move_aside(cfg: LakecleanerConfig, name: str, now_ms: int) -> str:
    """Keep a document this cleaner cannot read next to where it was, as ``<name>.corrupt-<now_ms>``
    (document_name leaves room for the mark), so that no writer replaces what it held. On a local
    disk a rename; elsewhere through pyiceberg's FileIO, a copy then a delete. Returns its location."""
    import os

    from pyiceberg.io import load_file_io

    source = f"{cfg.state_root}/{_checked_name(name)}"
    target = f"{cfg.state_root}/{_checked_name(f'{name}{CORRUPT_MARK}{int(now_ms)}')}"
    local = local_path(source)
    if local is not None:
        os.replace(local, local_path(target))
        return target
    io = load_file_io(cfg.catalog.pyiceberg_properties_resolved(), source)
    with io.new_input(source).open() as fh:
        data = fh.read()
    with io.new_output(target).create(overwrite=False) as fh:
        fh.write(data)
    io.delete(source)
    return target


def read_document(cfg: LakecleanerConfig, name: str) -> dict | None:
    """A document written by ``write_document``; None if there is none."""
    from pyiceberg.io import load_file_io

    location = f"{cfg.state_root}/{_checked_name(name)}"
    local = local_path(location)
    if local is not None:
        try:
            with open(local, "rb") as fh:
                return json.loads(fh.read())
        except FileNotFoundError:
            return None
    inp = load_file_io(cfg.catalog.pyiceberg_properties_resolved(), location).new_input(location)
    if not inp.exists():
        return None
    with inp.open() as fh:
        return json.loads(fh.read())


# ---------------------------------------------------------------- other files under the state root
# Files that are not documents (the Data Docs site's pages, styles and images) are read, written and
# deleted through pyiceberg's FileIO whatever the state root is (a local path, file:, s3:...), with
# the catalog's properties (its credentials): the one storage every lakecleaner process reaches.
def state_location(cfg: LakecleanerConfig, name: str) -> str:
    """Where the file ``name`` (a relative path, checked) lives under the state root."""
    return f"{cfg.state_root}/{_checked_name(name)}"


def _file_io(cfg: LakecleanerConfig, location: str):
    from pyiceberg.io import load_file_io

    return load_file_io(cfg.catalog.pyiceberg_properties_resolved(), location)


def put_file(cfg: LakecleanerConfig, name: str, data: bytes) -> str:
    """Write (or replace) the file ``name`` under the state root; returns its location."""
    location = state_location(cfg, name)
    with _file_io(cfg, location).new_output(location).create(overwrite=True) as fh:
        fh.write(data)
    return location


def get_file(cfg: LakecleanerConfig, name: str) -> bytes | None:
    """The bytes of the file ``name`` under the state root; None if there is none."""
    location = state_location(cfg, name)
    try:
        with _file_io(cfg, location).new_input(location).open() as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def file_size(cfg: LakecleanerConfig, name: str) -> int | None:
    """The size of the file ``name`` under the state root; None if there is none."""
    location = state_location(cfg, name)
    inp = _file_io(cfg, location).new_input(location)
    return len(inp) if inp.exists() else None


def delete_file(cfg: LakecleanerConfig, name: str) -> None:
    """Delete the file ``name`` under the state root (nothing if it is gone already)."""
    location = state_location(cfg, name)
    try:
        _file_io(cfg, location).delete(location)
    except FileNotFoundError:
        pass
