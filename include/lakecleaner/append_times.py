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
"""
from __future__ import annotations

import logging
from typing import Iterable, Mapping

from .config import LakecleanerConfig
from .state import document_name, read_document, write_document

log = logging.getLogger(__name__)


def _name(table: str) -> str:
    return f"append_times/{document_name(table)}"


def read_append_times(cfg: LakecleanerConfig, table: str) -> dict[int, int]:
    """Recorded commit times by snapshot id; {} when none (an unreadable document is said, and
    treated as none: the affected records read as old, as before this record existed)."""
    try:
        doc = read_document(cfg, _name(table)) or {}
        return {int(k): int(v) for k, v in doc.items()}
    except Exception as exc:  # noqa: BLE001 - this table's times only, said so
        log.warning("lakecleaner: table %s: unreadable append times %s/%s (%s: %s)", table, cfg.state_root,
                    _name(table), type(exc).__name__, exc)
        return {}


def record_append_times(cfg: LakecleanerConfig, table: str, adding_snapshots: Iterable[int],
                        known: Mapping[int, int]) -> dict[int, int]:
    """Keep the times of the snapshots that add the table's live files, from ``known`` (the table's
    snapshots now) or the document; ids no live file needs are dropped. Returns what was kept."""
    recorded = read_append_times(cfg, table)
    kept = {}
    for snapshot_id in set(adding_snapshots):
        at = known.get(snapshot_id, recorded.get(snapshot_id))
        if at is not None:
            kept[snapshot_id] = at
    if kept != recorded:
        write_document(cfg, _name(table), {str(k): v for k, v in sorted(kept.items())})
    return kept
