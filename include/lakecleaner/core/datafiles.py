"""A table's data file as Iceberg's metrics describe it, and the one answer to "is this data file
dirty?" (Kafka's ``cleanableOffsets``, asked of a file instead of a log segment).

Evaluation (pyiceberg's manifests), the run's planner (Spark's metadata tables) and maintenance's
clean-part rewrite all build a ``DataFile`` and ask ``judge``: no caller restates the rule.

The rule, per Kafka partition the file may hold (Kafka's logs are per partition; an Iceberg data
file may span several): records at or below the partition's checkpoint are clean, those past it
dirty, and a partition the checkpoint has not seen is wholly dirty. A file is judged from its
bounds alone, so it may hold every partition between its partition bounds (all of them when those
are unknown), and every offset between its offset bounds. It can be clean only if every partition
it may hold is covered by the checkpoint up to its upper offset: the planner never takes dirty
records for clean, and evaluation's ratio counts what the planner would clean.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping

from lakecleaner.core.rules import Partition, log_ends


@dataclass(frozen=True)
class Bounds:
    """A column's lower and upper bound over one data file (inclusive; None: no metrics)."""
    lower: int | None = None
    upper: int | None = None

    @property
    def known(self) -> bool:
        return self.lower is not None and self.upper is not None

    @property
    def single(self) -> int | None:
        """The one value the file holds, if its bounds say it holds only one."""
        return self.lower if self.lower is not None and self.lower == self.upper else None


UNKNOWN = Bounds()


@dataclass(frozen=True)
class DataFile:
    """One live data file, from Iceberg's metrics (no data read). Fields a reader does not know are
    left at their defaults: evaluation knows no versions, nulls or record counts."""
    size: int  # bytes
    offsets: Bounds  # of the offset column
    partitions: Bounds = UNKNOWN  # of the partition column (unknown: may hold any partition)
    appended_at_ms: int = 0  # commit time of the snapshot that added it (0: that snapshot is gone)
    records: int = 0
    path: str = ""  # empty where the reader did not keep it (evaluation's manifest cache)
    snapshot_id: int | None = None  # the snapshot that added it
    versions: Bounds = UNKNOWN  # as strategies.version_as_long_sql renders a version
    version_nulls: int | None = None  # records without a version (None: unknown)
    offset_nulls: int | None = None  # records without an offset (None: unknown)
    identity_nulls: int | None = None  # most nulls of an identity column (offset, partition, key; None: unknown)

    @property
    def may_hold_bad_records(self) -> bool:
        """Rule 7: may a record here lack its key, offset or partition?"""
        return self.identity_nulls is None or self.identity_nulls > 0

    def may_hold_offsets_through(self, ends: Mapping[Partition, int]) -> bool:
        """May the file hold a record of one of ``ends``' partitions at or below its end there
        (a late arrival inside a run's range)? Unknown bounds count as yes."""
        p, o = self.partitions, self.offsets
        return any((not p.known or p.lower <= part <= p.upper) and (o.lower is None or o.lower <= end)
                   for part, end in ends.items())


class Verdict(str, Enum):
    """What a file's bounds say of its records in one partition."""
    CLEAN = "clean"  # all at or below the partition's checkpoint
    DIRTY = "dirty"  # all past it (or the checkpoint has not seen the partition)
    STRADDLING = "straddling"  # may be either


@dataclass(frozen=True)
class FileJudgement:
    """A file against a checkpoint: per partition the checkpoint has seen that the file may hold,
    its checkpoint offset (``through``), and whether the file may also hold an unseen one."""
    offsets: Bounds
    through: Mapping[Partition, int]
    unseen: bool

    def verdict(self, partition: Partition) -> Verdict:
        """The file's records in ``partition`` (one of ``through``'s)."""
        through, o = self.through[partition], self.offsets
        may_be_dirty = o.upper is None or o.upper > through
        may_be_clean = o.lower is None or o.lower <= through
        if may_be_dirty != may_be_clean:
            return Verdict.DIRTY if may_be_dirty else Verdict.CLEAN
        return Verdict.STRADDLING

    @property
    def verdicts(self) -> dict[Partition, Verdict]:
        return {p: self.verdict(p) for p in self.through}

    @property
    def may_be_dirty(self) -> bool:
        """Does the dirty scan open it?"""
        return self.unseen or any(v is not Verdict.CLEAN for v in self.verdicts.values())

    @property
    def may_be_clean(self) -> bool:
        """Does the clean scan open it?"""
        return any(v is not Verdict.DIRTY for v in self.verdicts.values())

    @property
    def dirty_fraction(self) -> float:
        """Share of the file past the checkpoint, offsets spread evenly: in the partition it may
        hold that is dirtiest (evaluation's estimate; never lower than the truth for one partition)."""
        o = self.offsets
        if self.unseen or not o.known:
            return 1.0
        return max((_past(o, through) for through in self.through.values()), default=0.0)


def _past(o: Bounds, through: int) -> float:
    """Share of the offsets ``o`` above ``through``."""
    if o.lower > through:
        return 1.0
    if o.upper <= through:
        return 0.0
    return (o.upper - through) / (o.upper - o.lower + 1)


def judge(f: DataFile, checkpoint_offsets: Mapping[Partition, int], partitioned: bool) -> FileJudgement:
    """``f`` against the checkpoint's offsets (entries of the other layout, see
    Checkpoint.reset_other_layout, are ignored: they vouch for nothing here)."""
    if not partitioned:
        seen = {None: checkpoint_offsets[None]} if None in checkpoint_offsets else {}
        return FileJudgement(f.offsets, seen, not seen)
    p = f.partitions
    if not p.known:
        through = {k: v for k, v in checkpoint_offsets.items() if k is not None}
        return FileJudgement(f.offsets, through, True)
    through = {k: v for k, v in checkpoint_offsets.items() if k is not None and p.lower <= k <= p.upper}
    return FileJudgement(f.offsets, through, p.upper - p.lower + 1 > len(through))


def file_log_ends(files: Iterable[DataFile], partitioned: bool) -> dict[Partition, int] | None:
    """rules.log_ends from files' bounds (a file spanning partitions cannot say)."""
    return log_ends(((f.partitions.single, f.offsets.upper) for f in files), partitioned)
