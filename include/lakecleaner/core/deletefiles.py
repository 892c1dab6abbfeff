"""A table's delete files, and the one figure both evaluation and maintenance take from them.

Evaluation (pyiceberg's delete manifests, core.metadata) and maintenance (the Java table's delete
manifests, spark.maintenance) each build ``DeleteFile``s of the current snapshot's live entries and
ask ``delete_figures``: the page's delete files and bytes and maintenance's decision to rewrite are
the same numbers, computed once.

Counted as Iceberg's snapshot summary counts them (SnapshotSummary, ScanTaskUtil):

- delete files (``total-delete-files``): every live position-delete file (v2), deletion vector
  (v3: one per data file, several may share one Puffin file; each DV is a manifest entry and counts
  as one) and equality-delete file;
- delete bytes (their part of ``total-files-size``): a file's size, but a DV's blob
  (``content_size_in_bytes``), not the Puffin file it shares;
- deleted records (``total-position-deletes``): positions deleted, by position-delete files and DVs
  (a DV's cardinality); equality deletes match values, not records, so they are not counted here.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable

# Past this share of deleted records a table's clean files carrying deletes are rewritten even
# without a finite max.compaction.lag.ms (the small-file and delete-file clean-up).
REWRITE_DELETE_RATIO = 0.2


class DeleteKind(str, Enum):
    """What a delete file is (str-valued: evaluation's manifest cache keeps the string)."""
    POSITION = "position"  # a position-delete file (v2)
    DELETION_VECTOR = "deletion vector"  # a blob in a Puffin file (v3)
    EQUALITY = "equality"


@dataclass(frozen=True)
class DeleteFile:
    """One live delete file (or deletion vector) of the current snapshot, from its manifest entry."""
    kind: DeleteKind
    size: int  # bytes as Iceberg counts them: a DV's blob, else the whole file
    records: int  # the entry's record_count: positions deleted, or equality-delete rows


@dataclass(frozen=True)
class DeleteFigures:
    """A table's delete files, their bytes, and the share of its live records they delete."""
    files: int = 0
    bytes: int = 0
    deleted_records: int = 0
    live_records: int = 0  # records of the live data files (``total-records``)
    equality_files: int = 0  # of ``files``, equality-delete files (they hold key values)

    @property
    def ratio(self) -> float:
        """Deleted records / live data records (rounded as maintenance always reported it)."""
        return round(self.deleted_records / self.live_records, 4) if self.live_records else 0.0

    @property
    def masks_records(self) -> bool:
        """Some live data file has records a delete file masks (an equality delete's count is of
        key rows, not of the records it masks, but it masks some), so a rewrite has work."""
        return self.deleted_records > 0 or self.equality_files > 0

    @property
    def rewrite_due(self) -> bool:
        """Enough deleted records that maintenance rewrites without another reason to."""
        return self.deleted_records > 0 and self.ratio >= REWRITE_DELETE_RATIO


def delete_figures(deletes: Iterable[DeleteFile], live_records: int) -> DeleteFigures:
    """The figures of ``deletes`` (live entries of one snapshot) against its ``live_records``."""
    deletes = list(deletes)
    return DeleteFigures(
        files=len(deletes), bytes=sum(d.size for d in deletes),
        deleted_records=sum(d.records for d in deletes if d.kind is not DeleteKind.EQUALITY),
        live_records=live_records, equality_files=sum(d.kind is DeleteKind.EQUALITY for d in deletes))
