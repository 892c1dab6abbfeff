"""The hand-worked cases on the real Spark job, with real Iceberg commits as append times."""
import pytest

from cases import CASES, FORMAT_V3_CASES, expected_reason_counts, resolve_now
from lakecleaner.core.table import TableRef
from lakecleaner.spark.catalog import current_snapshot, format_version
from lakecleaner.spark.engine import compact_table
from lakecleaner_dev.tables import KAFKA_SCHEMA, append, create_compacted_table

pytestmark = pytest.mark.spark
SCHEMA = KAFKA_SCHEMA + ", `ver` bigint"


def _commit_time(spark, ref):
    snap = current_snapshot(spark, ref)
    return spark.sql(f"SELECT unix_millis(committed_at) AS at FROM {ref.meta('snapshots')} "
                     f"WHERE snapshot_id = {snap}").collect()[0]["at"]


# On Iceberg's JDBC catalog on PostgreSQL too, the cases where the catalog has a part beyond loading the
# table and committing its snapshot and checkpoint (which every case does): a commit's time dating a
# tombstone, a quarantine table created and written over several runs. The engine has no code of its own
# per catalog; the reference model against the job on generated logs runs on the JDBC catalog as well
# (test_engine_vs_model), and the rest of the cases ran on it until 2026-11-27.
ON_JDBC = ("a_runs_now_behind_its_commit_dates_the_tombstone_at_the_commit",
           "keyless_log_end_record_is_quarantined_once_kept_then_removed_once_not_last")


@pytest.mark.parametrize(("case", "catalog"), [
    *(pytest.param(c, "hadoop", id=f"{c.name}-hadoop") for c in CASES),
    *(pytest.param(c, "jdbc", id=f"{c.name}-jdbc") for c in CASES if c.name in ON_JDBC)])
def test_spark_job_on_hand_worked_case(spark, request, case, catalog):
    """Each case on the embedded Hadoop catalog, some on Iceberg's JDBC catalog on PostgreSQL (ON_JDBC)."""
    _run_case(spark, request.getfixturevalue("lake_config" if catalog == "hadoop" else "pg_config"), case)


@pytest.mark.parametrize("case", FORMAT_V3_CASES, ids=lambda c: c.name)
def test_spark_job_on_hand_worked_case_on_format_v3(spark, lake_config, case):
    """On a v3 table the runs mask records with deletion vectors (Puffin files, at most one live per
    data file), and the quarantine is a v3 table too: the same survivors, figures and copies."""
    ref = _run_case(spark, lake_config, case, version=3)
    deletes = spark.sql(f"SELECT file_format, referenced_data_file FROM {ref.meta('delete_files')}").collect()
    assert deletes and {d["file_format"] for d in deletes} == {"PUFFIN"}, deletes
    assert len({d["referenced_data_file"] for d in deletes}) == len(deletes)  # one deletion vector per file
    if any(run.quarantined for run in case.runs):
        assert format_version(spark, TableRef.parse(f"cases.{case.name}__quarantine", "lake")) == 3


def _run_case(spark, lake_config, case, version=2):
    name = lake_config.catalog.name
    table = f"cases.{case.name}"
    ref = create_compacted_table(spark, lake_config, table, case.props, schema=SCHEMA, format_version=version)
    spark.sql(f"DROP TABLE IF EXISTS {TableRef.parse(table + '__quarantine', name).sql()}")
    batch_times, run_nows, clean_times, appended = [], [], [], 0
    copied = []  # every record the runs so far copied to quarantine
    for i, run in enumerate(case.runs):
        last = len(case.batches) - 1 if run.after_batch is None else run.after_batch
        while appended <= last:
            append(spark, ref, case.batches[appended], SCHEMA)
            batch_times.append(_commit_time(spark, ref))
            appended += 1
        now = resolve_now(run.now, batch_times, run_nows, clean_times)
        run_nows.append(now)
        stats = compact_table(spark, lake_config, table, now_ms=now)
        clean_times.append(stats.get("cleaned_at_ms"))  # the later of now and the real commit
        assert stats["status"] == ("skipped" if run.now[0] == "run" and run.now[2] < 0 else "committed"), stats
        got = {(r["partition"], r["offset"]) for r in spark.table(ref.sql()).select("partition", "offset").collect()}
        assert got == run.survivors, f"run {i}: {stats}"
        for figure, count in expected_reason_counts(run).items():
            assert stats[figure] == count, f"run {i} {figure}: {stats}"
        copied += sorted(run.quarantined)
        if copied:  # each copied once: a record kept as the log end is not copied again
            quarantined = spark.table(TableRef.parse(table + "__quarantine", name).sql()).collect()
            assert sorted((r["partition"], r["offset"]) for r in quarantined) == sorted(copied), f"run {i}"
            assert {r["quarantine_reason"] for r in quarantined} == {"null key"}
    return ref


def test_cleaner_jvm_runs_with_its_options(spark):
    """The JVM options chosen for the cleaner (lakecleaner.core.sparkconf.JVM_OPTIONS) reach the driver JVM:
    the throughput collector is the one running."""
    from lakecleaner.core.sparkconf import JVM_OPTIONS

    management = spark._jvm.java.lang.management.ManagementFactory
    arguments = list(management.getRuntimeMXBean().getInputArguments())
    assert all(option in arguments for option in JVM_OPTIONS.split())
    collectors = {bean.getName() for bean in management.getGarbageCollectorMXBeans()}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}, collectors
