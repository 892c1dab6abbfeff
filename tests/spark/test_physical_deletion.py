"""After compaction + maintenance, a removed record is in no data file reachable from any snapshot."""
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakecleaner.spark.engine import compact_table
from lakecleaner.spark.maintenance import maintain_table
from lakecleaner_dev.tables import append, create_compacted_table

pytestmark = pytest.mark.spark


def _reachable_offsets(spark, ref) -> set:
    """(partition, offset, value) in every data file any snapshot can still reach, read raw."""
    return _reachable(spark, ref).records


@dataclass(frozen=True)
class OnDisk:
    """What the files any snapshot reaches hold: the records of the data files, and per delete file
    its format and the data files it masks rows of."""
    records: set
    data_files: set[str]
    deletes: dict[str, tuple[str, set[str]]]

    def masking(self, data_file: str) -> set[str]:
        """The formats of the delete files that mask rows of ``data_file``."""
        return {fmt for fmt, masked in self.deletes.values() if data_file in masked}


def _reachable(spark, ref) -> OnDisk:
    """Every file any snapshot can still reach (all_files: data and delete files alike), read raw.
    A delete file holds positions, never records (a v2 position-delete file: data file paths and
    row positions; a v3 deletion vector in a Puffin file: a bitmap of positions in its one
    referenced data file), so a record is on disk exactly while a reachable data file holds it,
    masked or not; of a delete file, what counts is which data files it points into."""
    found, data_files, deletes = set(), set(), {}
    for f in spark.sql(f"SELECT DISTINCT content, file_format, file_path, referenced_data_file "
                       f"FROM {ref.meta('all_files')}").collect():
        path = f["file_path"].replace("file:", "")
        if f["content"] == 0:
            found |= _records(path)
            data_files.add(path)
        elif f["file_format"] == "PUFFIN":
            deletes[path] = ("PUFFIN", {f["referenced_data_file"].replace("file:", "")})
        else:
            masked = pq.read_table(path, columns=["file_path"]).column("file_path").to_pylist()
            deletes[path] = (f["file_format"], {p.replace("file:", "") for p in masked})
    return OnDisk(found, data_files, deletes)


def _records(path: str) -> set:
    table = pq.read_table(path, columns=["partition", "offset", "value"])
    return set(zip(*(table.column(c).to_pylist() for c in ("partition", "offset", "value"))))


def _files_holding(spark, ref, record) -> set[str]:
    """The data files any snapshot reaches that hold (partition, offset, value) ``record``."""
    files = {r[0].replace("file:", "") for r in spark.sql(f"SELECT file_path FROM {ref.meta('all_data_files')}").collect()}
    return {path for path in files if record in _records(path)}


@pytest.mark.parametrize("format_version", [2, 3])
def test_removed_records_are_unreachable_after_maintenance(spark, lake_config, table_name, format_version):
    """On v2 the runs mask records with position-delete files, on v3 with deletion vectors; either
    way maintenance rewrites the data files holding them and expires the snapshots reaching the old
    ones, and no delete file is left pointing at a file that holds a removed record."""
    # a GDPR table: max.compaction.lag.ms is finite
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "1000",
                                                                   "delete.retention.ms": "0"},
                                 format_version=format_version)
    append(spark, ref, [{"key": "alice", "offset": 0, "partition": 0, "value": "alice's address"},
                        {"key": "bob", "offset": 1, "partition": 0, "value": "bob v1"}])
    compact_table(spark, lake_config, table_name)  # clean part: alice, bob
    append(spark, ref, [{"key": "alice", "offset": 2, "partition": 0, "value": None},  # erase alice
                        {"key": "bob", "offset": 3, "partition": 0, "value": "bob v2"},
                        {"key": "carol", "offset": 4, "partition": 0, "value": "carol"}])
    stats = compact_table(spark, lake_config, table_name)
    assert stats["removed_superseded"] == 2
    before = _reachable(spark, ref)
    assert (0, 0, "alice's address") in before.records  # masked, not yet gone
    [holding] = _files_holding(spark, ref, (0, 0, "alice's address"))
    assert before.masking(holding) == {"PUFFIN" if format_version == 3 else "PARQUET"}, before  # a DV on v3
    out = maintain_table(spark, lake_config, table_name)
    assert out["rewritten_data_files"] >= 1, out
    after = _reachable(spark, ref)
    assert (0, 0, "alice's address") not in after.records and (0, 1, "bob v1") not in after.records
    assert {(0, 2, None), (0, 3, "bob v2"), (0, 4, "carol")} <= after.records
    assert holding not in after.data_files and not any(after.masking(f) for f in after.data_files), after
    if format_version == 3:  # a deletion vector goes with the data file it masks; a v2 delete file may dangle
        assert not after.deletes, after
    # the tombstone itself goes after delete.retention.ms, and maintenance makes that physical too
    time.sleep(0.01)
    append(spark, ref, [{"key": "dave", "offset": 5, "partition": 0, "value": "dave"}])
    assert compact_table(spark, lake_config, table_name)["removed_expired_tombstones"] == 1
    maintain_table(spark, lake_config, table_name)
    assert not {r for r in _reachable_offsets(spark, ref) if r[1] == 2}
    assert sorted(r["offset"] for r in spark.table(ref.sql()).collect()) == [3, 4, 5]
    # No delete file older than every live data file is left: Iceberg's commits drop those by
    # themselves, which maintenance relies on where it runs no dangling-delete pass (iceberg_ops.DELETES_OUT)
    seqs = spark.sql(f"SELECT data_file.content AS content, sequence_number AS seq FROM {ref.meta('entries')} "
                     "WHERE status < 2").collect()
    oldest_data = min(r["seq"] for r in seqs if r["content"] == 0)
    assert all(r["seq"] >= oldest_data for r in seqs if r["content"] != 0), seqs


def test_maintenance_keeps_snapshots_younger_than_the_lag(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name, {"min.compaction.lag.ms": str(3_600_000),
                                                                   "max.compaction.lag.ms": str(7_200_000)})
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "x"}])
    append(spark, ref, [{"key": "a", "offset": 1, "partition": 0, "value": "y"}])
    before = spark.sql(f"SELECT count(*) AS n FROM {ref.meta('snapshots')}").collect()[0]["n"]
    maintain_table(spark, lake_config, table_name)
    after = spark.sql(f"SELECT count(*) AS n FROM {ref.meta('snapshots')}").collect()[0]["n"]
    assert after == before  # both appends are younger than min.compaction.lag.ms: their times are needed


@pytest.mark.parametrize("tz", ["Asia/Tokyo", "America/Los_Angeles"])
def test_snapshot_expiry_cut_does_not_move_with_the_time_zone(spark, lake_config, table_name, tz, monkeypatch):
    """Three appends, the first two older than min.compaction.lag.ms, the third younger: expiry
    keeps the newest old one (it bounds the append times still needed) and the young one, east
    and west of UTC alike (a cut read in local time and written back as UTC moves by hours)."""
    lag_ms = 4_000
    ref = create_compacted_table(spark, lake_config, table_name, {"min.compaction.lag.ms": str(lag_ms)})
    for offset in (0, 1):
        append(spark, ref, [{"key": "a", "offset": offset, "partition": 0, "value": "x"}])
    time.sleep(lag_ms / 1000 + 1)
    append(spark, ref, [{"key": "b", "offset": 2, "partition": 0, "value": "y"}])
    ids = [r["snapshot_id"] for r in spark.sql(f"SELECT snapshot_id FROM {ref.meta('snapshots')} "
                                               "ORDER BY committed_at").collect()]
    monkeypatch.setenv("TZ", tz)  # the machine's zone, as Python sees it; Spark's session zone stays UTC
    time.tzset()
    try:
        maintain_table(spark, lake_config, table_name)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    left = {r["snapshot_id"] for r in spark.sql(f"SELECT snapshot_id FROM {ref.meta('snapshots')}").collect()}
    assert ids[0] not in left and {ids[1], ids[2]} <= left


def test_snapshot_expiry_keeps_what_the_tables_own_history_settings_ask_for(spark, lake_config, table_name):
    """history.expire.min-snapshots-to-keep=3: maintenance keeps three snapshots where it would
    keep one, and says what bounds physical deletion then."""
    ref = create_compacted_table(spark, lake_config, table_name, {"history.expire.min-snapshots-to-keep": "3"})
    for offset in range(5):
        append(spark, ref, [{"key": "a", "offset": offset, "partition": 0, "value": f"v{offset}"}])
    out = maintain_table(spark, lake_config, table_name)
    left = spark.sql(f"SELECT count(*) AS n FROM {ref.meta('snapshots')}").collect()[0]["n"]
    assert left == 3 and out["snapshots_expired"] == 2 and "not bounded in time" in out["physical_deletion"]


def test_maintenance_keeps_the_append_time_of_dirty_records_in_a_straddling_file(spark, lake_config, table_name):
    """A run cut by compaction.max.records.per.run leaves its checkpoint inside a data file. The
    clean-part rewrite must not select that file: rewriting it whole would move its dirty records
    into the rewrite's snapshot, restarting their min/max.compaction.lag.ms clocks."""
    from lakecleaner.core.table import TableRef
    from lakecleaner.spark.catalog import load_table_config
    from lakecleaner.spark.files import data_files
    from lakecleaner.core.scheduler import evaluate_all

    hour = 3_600_000
    ref = create_compacted_table(spark, lake_config, table_name, {
        "min.compaction.lag.ms": str(hour), "max.compaction.lag.ms": str(2 * hour),
        "compaction.max.records.per.run": "7"})
    append(spark, ref, [{"key": k, "offset": o, "partition": 0, "value": f"v{o}"}
                        for o, k in enumerate(["a", "b", "a", "b"])])
    append(spark, ref, [{"key": k, "offset": o, "partition": 0, "value": f"v{o}"}
                        for o, k in enumerate(["a", "c", "d", "e", "f", "g"], start=4)])
    appended_at = spark.sql(f"SELECT unix_millis(committed_at) AS t FROM {ref.meta('snapshots')} "
                            "ORDER BY committed_at").collect()[1]["t"]
    now = int(time.time() * 1000) + 90 * 60_000  # every record older than min.compaction.lag.ms
    stats = compact_table(spark, lake_config, table_name, now_ms=now)
    cut = stats["checkpoint"]["0"]
    assert stats["removed_superseded"] >= 3 and 4 <= cut < 9, stats  # the run stopped inside the second file
    out = maintain_table(spark, lake_config, table_name, now_ms=now)
    assert out["snapshots_expired"] == 0, out  # every snapshot is younger than the lag: times are known

    tc, _ = load_table_config(spark, lake_config, TableRef.parse(table_name, lake_config.catalog.name))
    current = spark.sql(f"SELECT snapshot_id FROM {ref.meta('snapshots')} ORDER BY committed_at DESC LIMIT 1"
                        ).collect()[0]["snapshot_id"]
    dirty = [f for f in data_files(spark, ref, tc, current) if f.offsets.upper > cut]
    assert dirty and {f.appended_at_ms for f in dirty} == {appended_at}  # what the next compaction reads
    later = now + 2 * hour
    ev = {e.table: e for e in evaluate_all(lake_config, [table_name], now_ms=later)}[table_name]
    assert ev.max_compaction_delay_ms == later - appended_at - 2 * hour  # what evaluate reads


def test_expiry_keeps_the_append_time_of_records_an_ingest_appended_during_the_run(spark, lake_config, table_name):
    """Ingest goes on while the cleaner runs: a file appended after the run's snapshot is dirty, and
    maintenance expires the snapshot that added it. Its records must keep their append time, or
    they read as appended at epoch 0: a compaction delay of decades, a failed freshness rule and a
    must-clean table on every run."""
    from lakecleaner.core.append_times import read_append_times
    from lakecleaner.core.table import TableRef
    from lakecleaner.spark.catalog import load_table_config
    from lakecleaner.spark.files import data_files
    from lakecleaner.spark.quality import validate_table
    from lakecleaner.core.scheduler import evaluate_all

    hour = 3_600_000
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": str(hour)})
    append(spark, ref, [{"key": k, "offset": o, "partition": 0, "value": f"v{o}"} for o, k in enumerate("aba")])
    now = int(time.time() * 1000)
    compact_table(spark, lake_config, table_name, now_ms=now)
    append(spark, ref, [{"key": "c", "offset": 3, "partition": 0, "value": "v3"}])  # during the run
    added = spark.sql(f"SELECT snapshot_id, unix_millis(committed_at) AS t FROM {ref.meta('snapshots')} "
                      "ORDER BY committed_at DESC LIMIT 1").collect()[0]
    assert maintain_table(spark, lake_config, table_name, now_ms=now)["snapshots_expired"] >= 1
    left = {r["snapshot_id"] for r in spark.sql(f"SELECT snapshot_id FROM {ref.meta('snapshots')}").collect()}
    assert added["snapshot_id"] not in left  # its commit time is no longer in the table's metadata

    later = added["t"] + 2 * hour
    ev = {e.table: e for e in evaluate_all(lake_config, [table_name], now_ms=later)}[table_name]
    assert ev.max_compaction_delay_ms == later - added["t"] - hour  # what evaluate reads
    tc, _ = load_table_config(spark, lake_config, TableRef.parse(table_name, lake_config.catalog.name))
    current = spark.sql(f"SELECT snapshot_id FROM {ref.meta('snapshots')} ORDER BY committed_at DESC LIMIT 1"
                        ).collect()[0]["snapshot_id"]
    dirty = [f for f in data_files(spark, ref, tc, current, read_append_times(lake_config, table_name))
             if f.offsets.upper == 3]
    assert [f.appended_at_ms for f in dirty] == [added["t"]]  # what the next compaction reads
    summary = validate_table(spark, lake_config, table_name, now_ms=added["t"] + hour // 2, raise_on_failure=False)
    assert all(r["success"] for r in summary["rules"] if r["rule"].startswith("freshness")), summary


def test_a_keyless_log_end_record_keeps_the_checkpoint_valid_through_maintenance(spark, lake_config, table_name):
    """Found by `make chaos`: a keyless last record was quarantined and removed, maintenance's rewrite
    then dropped it physically, the table's highest offset fell below the checkpoint, and evaluate
    reset the checkpoint ("past the log end"): the whole partition looked dirty again, the freshness
    rule failed. The log end record stays (rule 6), whatever its key."""
    from lakecleaner.core.scheduler import evaluate_all

    hour = 3_600_000
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": str(hour)})
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "v0"},
                        {"key": "a", "offset": 1, "partition": 0, "value": "v1"},
                        {"key": None, "offset": 2, "partition": 0, "value": "keyless"}])
    now = int(time.time() * 1000)
    assert compact_table(spark, lake_config, table_name, now_ms=now)["quarantined"] == 1
    assert maintain_table(spark, lake_config, table_name, now_ms=now)["rewritten_data_files"] >= 1
    assert max(r["offset"] for r in spark.table(ref.sql()).collect()) == 2  # the log end is still there
    ev = {e.table: e for e in evaluate_all(lake_config, [table_name], now_ms=now + 2 * hour)}[table_name]
    assert ev.dirty_ratio == 0.0 and ev.max_compaction_delay_ms == 0 and "reset" not in ev.reason, ev


def test_a_corrupt_append_times_record_fails_only_its_tables_maintenance(spark, lake_config, table_name):
    """Its times are never replaced: the document is moved aside, the table's maintenance fails
    naming it before any snapshot expires, and the next table's maintenance runs as usual."""
    from pathlib import Path

    from lakecleaner.spark.batch import BatchRequest, clean_tables
    from lakecleaner.core.state import local_path

    tables = [table_name, f"{table_name}_next"]
    for name in tables:
        ref = create_compacted_table(spark, lake_config, name, {})
        append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "v0"}])
        assert compact_table(spark, lake_config, name)["checkpoint"] == {"0": 0}  # now: after the append
        append(spark, ref, [{"key": "a", "offset": 1, "partition": 0, "value": "v1"}])
    now = int(time.time() * 1000)
    record = Path(local_path(lake_config.state_root)) / "append_times" / f"{table_name}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text('{"1": 17')
    snapshots = f"SELECT count(*) AS n FROM lake.{table_name}.snapshots"
    before = spark.sql(snapshots).collect()[0]["n"]
    corrupt, ok = clean_tables(spark, lake_config, BatchRequest(tuple(tables), now, steps=("maintain",)),
                               emit=lambda line: None)
    assert corrupt.status == "failed" and corrupt.failed_step == "maintain", corrupt
    assert corrupt.error.startswith(f"table {table_name}: append times ") and str(record) in corrupt.error
    assert spark.sql(snapshots).collect()[0]["n"] == before  # nothing expired
    assert not record.exists() and [p.read_text() for p in record.parent.glob(f"{record.name}.corrupt-*")] == ['{"1": 17']
    assert ok.status == "ok" and ok.steps["maintain"]["snapshots_expired"] >= 1, ok


def _equality_delete(spark, ref, partition: int, key: str) -> None:
    """Another writer's equality delete of ``key`` in one partition (a CDC sink's upsert writes
    these; the cleaner never does): a Parquet file of the key column by its Iceberg field id,
    committed as a row delta."""
    import uuid

    import pyarrow as pa

    from lakecleaner.spark.catalog import iceberg_table

    table = iceberg_table(spark, ref)
    field_id = table.schema().findField("key").fieldId()
    path = f"{table.location()}/data/partition={partition}/eq-{uuid.uuid4().hex}.parquet"
    local = path.replace("file:", "")
    schema = pa.schema([pa.field("key", pa.string(), metadata={b"PARQUET:field_id": str(field_id).encode()})])
    pq.write_table(pa.table({"key": [key]}, schema=schema), local)
    jvm = spark._jvm
    ids = spark.sparkContext._gateway.new_array(jvm.int, 1)
    ids[0] = field_id
    # the key's bounds, as a writer's metrics give them: Iceberg applies the file only to data files
    # whose key bounds overlap these
    bounds = jvm.java.util.HashMap()
    bounds.put(field_id, jvm.org.apache.iceberg.types.Conversions.toByteBuffer(
        jvm.org.apache.iceberg.types.Types.StringType.get(), key))
    metrics = jvm.org.apache.iceberg.Metrics(1, None, None, None, None, bounds, bounds)
    delete = (jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(table.spec()).ofEqualityDeletes(ids)
              .withPath(path).withFormat("parquet").withFileSizeInBytes(Path(local).stat().st_size)
              .withMetrics(metrics).withPartitionPath(f"partition={partition}").build())
    table.newRowDelta().addDeletes(delete).commit()


def test_an_equality_delete_the_rewrite_leaves_dangling_goes_with_it(spark, lake_config, table_name):
    """An equality-delete file holds the key values it deletes. Once maintenance has rewritten the
    files it applied to, it applies to nothing; Iceberg's commits would keep it while an older data
    file lives in another partition, so maintenance asks for Iceberg's dangling-delete pass when an
    equality delete is live (spark.maintenance.rewrite_options) and the file goes."""
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "1000",
                                                                   "delete.retention.ms": "0"})
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "a"}])  # the oldest data file
    append(spark, ref, [{"key": "k1", "offset": 0, "partition": 1, "value": "v1"},
                        {"key": "k1", "offset": 1, "partition": 1, "value": "v2"},
                        {"key": "k9", "offset": 2, "partition": 1, "value": "erase me"}])
    assert compact_table(spark, lake_config, table_name)["removed_superseded"] == 1
    _equality_delete(spark, ref, 1, "k9")
    live_equality = f"SELECT count(*) FROM {ref.meta('entries')} WHERE status < 2 AND data_file.content = 2"
    assert spark.sql(live_equality).collect()[0][0] == 1
    out = maintain_table(spark, lake_config, table_name)
    assert out["rewritten_data_files"] >= 1, out
    assert spark.sql(live_equality).collect()[0][0] == 0
    assert sorted((r["partition"], r["offset"]) for r in spark.table(ref.sql()).collect()) == [(0, 0), (1, 1)]
    assert not {r for r in _reachable_offsets(spark, ref) if r[2] == "erase me"}


def test_an_erasure_that_an_equality_delete_still_holds_promises_no_deadline(spark, lake_config, table_name):
    """Another writer's equality delete of the key stays live while an older data file of its
    partition does, and a file no delete touches is never rewritten: no deadline can be promised
    (forget's verdict), and the remedy its note names removes the file."""
    from lakecleaner.spark.forget import ForgetRequest, forget

    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "1000",
                                                                   "delete.retention.ms": "0"})
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 1, "value": "a"}])  # older, untouched
    # a file of the target size, as a real table's older files are: a rewrite selects it only for its deletes
    [size] = [r[0] for r in spark.sql(f"SELECT file_size_in_bytes FROM {ref.meta('data_files')}").collect()]
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('write.target-file-size-bytes' = '{size}')")
    append(spark, ref, [{"key": "k9", "offset": 1, "partition": 1, "value": "erase me"}])
    compact_table(spark, lake_config, table_name)
    _equality_delete(spark, ref, 1, "k9")
    now = int(time.time() * 1000)
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "k9"},)), now_ms=now, interval_ms=60_000)
    assert not result.physically_removed
    assert result.deadline_ms is None and "1 equality-delete file(s)" in result.deadline_note, result.deadline_note
    data_files = [r[0] for r in spark.sql(f"SELECT DISTINCT file_path FROM {ref.meta('all_data_files')}").collect()]
    assert "erase me" not in {v for f in data_files for v in pq.read_table(f.replace("file:", ""))["value"].to_pylist()}
    spark.sql(f"CALL {ref.catalog}.system.rewrite_data_files(table => '{ref.short}', where => 'partition = 1', "
              "options => map('rewrite-all', 'true', 'remove-dangling-deletes', 'true'))")
    live_equality = f"SELECT count(*) FROM {ref.meta('entries')} WHERE status < 2 AND data_file.content = 2"
    assert spark.sql(live_equality).collect()[0][0] == 0
