"""The values one run hands from phase to phase (engine builds them, plans decide from them): what
it read at its pinned snapshot, its bad records, its range, the clean part as phase 2 reads it.
In-process records, typed in content: partitions as the engine numbers them (EnginePartition: 0
for an unpartitioned table, whose checkpoint says None), offsets, Spark DataFrames."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence, TypeVar

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from lakecleaner.core.config import TableConfig
from lakecleaner.core.datafiles import DataFile
from lakecleaner.core.rules import Checkpoint, Partition, partition_value
from lakecleaner.core.strategies import RankBounds
from lakecleaner.core.table import TableRef
from lakecleaner.spark.files import dirty_rank_bounds
from lakecleaner.spark.frames import Frames

EnginePartition = int  # a partition as the run's frames number it (0: an unpartitioned table)
Offset = int
Offsets = Mapping[EnginePartition, Offset]  # an offset per partition (an end, a log end, a cut)
Counts = Mapping[EnginePartition, int]  # a number of records per partition
DataFiles = Sequence[DataFile]  # files.data_files: a table's live data files with Iceberg's metrics
V = TypeVar("V")


class Held:
    """The frames a run persists (spilling to disk), released together when the run ends, so memory
    stays bounded across the tables of one application."""

    def __init__(self) -> None:
        self.frames: list[DataFrame] = []

    def __call__(self, df: DataFrame) -> DataFrame:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.frames.append(df)
        return df

    def release(self) -> None:
        for frame in self.frames:
            frame.unpersist()
        self.frames.clear()


@dataclass(frozen=True)
class RunStart:
    """What a run reads before deciding anything: the table's settings and checkpoint at one pinned
    snapshot, and its live data files with Iceberg's metrics."""
    ref: TableRef
    tc: TableConfig
    fr: Frames
    snapshot: int
    ckpt: Checkpoint
    ckpt_property: str | None  # the checkpoint property as read: what the run's own write replaces
    retained: Offsets  # log ends an earlier run kept (the checkpoint's, by engine partition)
    files: DataFiles
    base: DataFrame  # the table at the pinned snapshot
    now_ms: int

    @property
    def ckpt_offsets(self) -> Mapping[Partition, Offset]:
        """The checkpoint's offsets (key None: an unpartitioned table)."""
        return self.ckpt.offsets

    @property
    def unpartitioned(self) -> bool:
        return self.tc.partition_column is None

    @property
    def rank_bounds(self) -> RankBounds | None:
        return dirty_rank_bounds(self.files, self.ckpt_offsets, self.unpartitioned)

    @staticmethod
    def internal(by_partition: Mapping[Partition, V]) -> dict[EnginePartition, V]:
        """Internally an unpartitioned table is partition 0; the checkpoint says None."""
        return {partition_value(p): v for p, v in by_partition.items()}

    def external(self, by_partition: Mapping[EnginePartition, V]) -> dict[Partition, V]:
        return {(None if self.unpartitioned else p): v for p, v in by_partition.items()}


@dataclass(frozen=True)
class BadRecords:
    """Rule 7: records without a key, offset or partition, which go to quarantine."""
    rows: DataFrame
    n: int
    quarantined: int  # copied by this run: not those an earlier run copied and kept as the log end
    ends: Offsets  # partition -> its highest bad offset


@dataclass(frozen=True)
class BadFigures:
    """Per partition (None: a null partition), its bad records, their highest offset (None: none
    has one), and how many of them an earlier run copied to quarantine and kept as the log end."""
    p: EnginePartition | None
    n: int
    end: Offset | None
    copied_before: int


@dataclass(frozen=True)
class PartitionSums:
    """One partition of a key map, summed (plans.key_map_sums): its last offset, records, keys,
    anomalous records, the keys whose run winner is a tombstone and stays the winner (new
    tombstones), the keys whose cleaned record wins as a tombstone past its horizon (``expired``,
    the highest such offset ``expired_o``), records outside the packed rank's bounds, and whether
    the key of its last offset keeps another record (``end_loses``: a log end that loses, rule 6)."""
    p: EnginePartition
    end: Offset
    n: int
    keys: int
    anom: int
    new_tombstones: int
    expired: int
    expired_o: Offset | None
    outside: int
    end_loses: bool


@dataclass(frozen=True)
class KeyMap:
    """A key map (plans.key_map) held for the run, and its per-partition sums."""
    frame: DataFrame
    sums: tuple[PartitionSums, ...]


@dataclass(frozen=True)
class RunRange:
    """Phase 1's result: the run's records (a prefix of each partition's dirty part, old enough and
    within the budget) and where the run stops."""
    in_run: DataFrame
    n_run: int
    ends: Offsets  # partition -> the run's last offset there
    log_end: Offsets  # partition -> its highest dirty offset
    dirty_partitions: frozenset[EnginePartition]
    young_min: Offsets  # partition -> its first offset younger than the lag
    cut: Counts  # partitions the budget ends inside -> the records it takes there
    taken: frozenset[EnginePartition]  # partitions the budget takes records of
    anomalous: int
    key_map: KeyMap | None = None  # when phase 1 could build it from the whole dirty part


@dataclass(frozen=True)
class CleanRivals:
    """How a versioned key map meets the clean part: each run record that may lose (a version at or
    below the clean ``ceiling``, or none) looks its key up there, and the cleaned record found joins
    the run's own records in the one aggregation that builds the map (no second pass over it). A
    cleaned record beats a run record only with a higher version, so a run record above the ceiling
    looks nothing up, and the clean part is read only at or above each partition's ``floors``."""
    clean: DataFrame  # the clean part's narrow columns (no tombstone: deciding one reads the widest column)
    expired_clean: DataFrame | None  # the clean tombstones past their horizon (p, o)
    ceiling: int | None  # files.clean_version_ceiling
    floors: Mapping[EnginePartition, int | None] | None  # files.dirty_version_floors
    late_bound: int  # at most this many run records may look up: broadcast them, or not


@dataclass(frozen=True)
class CleanPart:
    """The clean part as phase 2 reads it: its narrow columns, its tombstones past their horizon
    (rule 5, by partition the highest offset whose horizon has passed), and how a versioned key map
    looks its records up (None: the offset strategy, or nothing cleaned yet)."""
    clean: DataFrame
    expired_clean: DataFrame | None
    expired_through: Offsets
    rivals: CleanRivals | None
