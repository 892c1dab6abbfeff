"""Append times that outlive snapshot expiry.

A record's append time is the commit time of the snapshot that added its data file; both lag
clocks (min.compaction.lag.ms, max.compaction.lag.ms) count from it. Maintenance expires old
snapshots to make deletes physical, and with them it would lose the times of files they added
that are still live: records an ingest appended while the run was going (dirty, the next run's)
would then read as appended at epoch 0, show a compaction delay of decades, fail the freshness
rule and make the table must-clean on every run. So before expiring, maintenance keeps the commit
time of every snapshot that added a live data file here (``append_times/<table>.json``: snapshot
id -> commit ms), and every reader of append times falls back to it. Only ids still adding a live
file are kept, so the document stays as small as the table's live snapshot set.

A document that cannot be parsed is never replaced: maintenance moves it aside (its times are
there for an operator to restore) and fails for that table, before expiring anything.
"""
from __future__ import annotations

import logging
import time
from typing import Iterable, Mapping

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.state import document_name, move_aside, read_document, write_document

log = logging.getLogger(__name__)


class AppendTimesError(ValueError):
    """A table's append times document cannot be read; the table's maintenance stops."""


def _name(table: str) -> str:
    return f"append_times/{document_name(table)}"


def _recorded(cfg: LakecleanerConfig, name: str) -> dict[int, int]:
    """The document's times; {} when there is none. Raises ValueError or TypeError for a document
    this cleaner did not write, OSError (or the object store's error) when it cannot be read."""
    doc = read_document(cfg, name)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise TypeError(f"expected an object of snapshot id -> commit ms, got a {type(doc).__name__}")
    out = {}
    for key, at in doc.items():
        if isinstance(at, bool) or not isinstance(at, int):
            raise TypeError(f"snapshot {key}: commit time {str(at)[:40]!r} is not an integer")
        out[int(key)] = at
    return out


def read_append_times(cfg: LakecleanerConfig, table: str) -> dict[int, int]:
    """Recorded commit times by snapshot id; {} when none (an unreadable document is said, and
    treated as none: the affected records read as old, until maintenance moves it aside)."""
    name = _name(table)
    try:
        return _recorded(cfg, name)
    except Exception as exc:  # noqa: BLE001 - this table's times only, said so
        log.warning("lakecleaner: table %s: unreadable append times %s/%s (%s: %s)", table, cfg.state_root,
                    name, type(exc).__name__, str(exc)[:300])
        return {}


def _recorded_to_write(cfg: LakecleanerConfig, table: str) -> dict[int, int]:
    """The document for its writer. One it cannot parse held the times of records whose snapshots
    are gone: it is moved aside, kept, and the table's maintenance fails (AppendTimesError) before
    it expires a snapshot. The next maintenance starts a new document."""
    name = _name(table)
    where = f"{cfg.state_root}/{name}"
    try:
        return _recorded(cfg, name)
    except (ValueError, TypeError) as exc:
        problem = f"{type(exc).__name__}: {str(exc)[:300]}"
    except Exception as exc:  # noqa: BLE001 - not read at all (storage): left where it is
        raise AppendTimesError(f"table {table}: append times {where} cannot be read ({type(exc).__name__}: "
                               f"{str(exc)[:300]}); no snapshot expired") from None
    try:
        kept = move_aside(cfg, name, int(time.time() * 1000))
    except Exception as exc:  # noqa: BLE001 - said below; the document stays, nothing expires
        raise AppendTimesError(f"table {table}: append times {where} are corrupt ({problem}) and could not be moved "
                               f"aside ({type(exc).__name__}: {exc}); no snapshot expired") from None
    raise AppendTimesError(
        f"table {table}: append times {where} are corrupt ({problem}); moved aside to {kept}, no snapshot "
        "expired. The next maintenance starts a new document: records of snapshots expired before read as "
        "appended at epoch 0 until cleaned, unless their times are restored from the copy")


def record_append_times(cfg: LakecleanerConfig, table: str, adding_snapshots: Iterable[int],
                        known: Mapping[int, int]) -> dict[int, int]:
    """Keep the times of the snapshots that add the table's live files, from ``known`` (the table's
    snapshots now) or the document; ids no live file needs are dropped. Returns what was kept.
    Raises AppendTimesError, naming the table and the document, when the document is unreadable."""
    needed = set(adding_snapshots)
    recorded = _recorded_to_write(cfg, table)
    kept = _kept(needed, known, recorded)
    if kept != recorded:
        # Two maintenances of one table (a backfill's beside a scheduled run's) may both be here: what
        # the other wrote since this one read is kept too, re-read just before writing, so one cannot
        # drop a time the other saved before expiring its snapshot (a small window remains).
        kept = _kept(needed, known, {**_recorded_to_write(cfg, table), **recorded})
        write_document(cfg, _name(table), {str(k): v for k, v in sorted(kept.items())})
    return kept


def _kept(needed: set[int], known: Mapping[int, int], recorded: Mapping[int, int]) -> dict[int, int]:
    """The times of the needed snapshots, from the table's snapshots or the document."""
    return {s: at for s in needed if (at := known.get(s, recorded.get(s))) is not None}
