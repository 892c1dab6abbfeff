"""The cleaner on a real shared catalog: Iceberg's JDBC catalog on a real PostgreSQL server, Spark
through JdbcCatalog and pyiceberg through SqlCatalog on the same database."""
import time

import pytest

from lakecleaner.core.config import CHECKPOINT_PROPERTY
from lakecleaner.core.table import TableRef
from lakecleaner.spark.catalog import load_table_config
from lakecleaner.spark.engine import compact_table
from lakecleaner.spark.maintenance import maintain_table
from lakecleaner.core.model import compact
from lakecleaner.spark.quality import validate_table
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.scheduler import evaluate_all
from lakecleaner_dev.tables import append, create_compacted_table, read_model_records, record_ids

pytestmark = pytest.mark.spark


def _rows(start, n, keys=7):
    return [{"key": None if i % 13 == 5 else f"k{i % keys}", "offset": i, "partition": i % 2,
             "value": None if i % 11 == 0 else f"v{i}"} for i in range(start, start + n)]


def test_compact_evaluate_maintain_validate_on_the_jdbc_catalog(spark, pg_config):
    table = f"pg{int(time.time() * 1000) % 10**8}.orders"
    ref = create_compacted_table(spark, pg_config, table)
    assert ref.catalog == "pglake"
    append(spark, ref, _rows(0, 40))
    compact_table(spark, pg_config, table)
    append(spark, ref, _rows(40, 60))
    now = int(time.time() * 1000) + 1

    evs = {e.table: e for e in evaluate_all(pg_config, now_ms=now)}  # pyiceberg's SqlCatalog lists it
    assert evs[table].eligible and 0 < evs[table].dirty_ratio < 1 and evs[table].clean_bytes > 0

    records, tc = read_model_records(spark, pg_config, table)
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql()}").collect()}
    outcome = compact(records, Checkpoint.from_json(props.get("lakecleaner.checkpoint")), tc, now)
    stats = compact_table(spark, pg_config, table, now_ms=now)
    assert stats["status"] == "committed" and record_ids(spark, ref) == sorted(r.id for r in outcome.survivors(records))
    quarantine = spark.table(TableRef.parse(table + "__quarantine", "pglake").sql())
    assert set(outcome.quarantined) <= set(record_ids(spark, TableRef.parse(table + "__quarantine", "pglake")))
    assert quarantine.count() == stats["quarantined"] + 3  # the first run's three keyless records too

    out = maintain_table(spark, pg_config, table, now_ms=now)
    assert out["snapshots_expired"] >= 1
    assert validate_table(spark, pg_config, table, now, "pg-run-1")["success"]
    after = {e.table: e for e in evaluate_all(pg_config, now_ms=now + 1)}[table]
    assert after.dirty_ratio == 0.0 and not after.eligible


def _config_file(cfg, path):
    import yaml

    from lakecleaner.core.config import config_document

    doc = config_document(cfg)
    doc["spark"].update(master="local[1]", driver_memory="1g")
    path.write_text(yaml.safe_dump(doc))
    return path


APPENDER = """
import sys, time
from lakecleaner.core.config import load_config
from lakecleaner.core.table import TableRef
from lakecleaner.spark.session import get_spark
from lakecleaner_dev.tables import append
cfg = load_config(sys.argv[1])
spark = get_spark(cfg, "appender")
ref = TableRef.parse(sys.argv[2], cfg.catalog.name)
for b in range(int(sys.argv[3])):
    start = 1000 + b * 20
    append(spark, ref, [{"key": f"k{i % 7}", "offset": i, "partition": i % 2, "value": f"v{i}"}
                        for i in range(start, start + 20)])
    print("appended", b, flush=True)
    time.sleep(0.5)
spark.stop()
"""


def test_an_appender_in_another_process_loses_nothing_to_the_cleaner(spark, pg_config, tmp_path):
    """An ingest job in its own JVM appends while the cleaner commits in this one: the catalog's
    compare-and-swap of the metadata location makes the loser of a race retry or stop, never
    overwrite; every appended record ends as the reference model says."""
    import subprocess
    import sys

    table = f"pg{int(time.time() * 1000) % 10**8}.ingest"
    ref = create_compacted_table(spark, pg_config, table)
    append(spark, ref, _rows(0, 40))
    script = tmp_path / "appender.py"
    script.write_text(APPENDER)
    batches = 12
    proc = subprocess.Popen([sys.executable, str(script), str(_config_file(pg_config, tmp_path / "pg.yaml")), table,
                             str(batches)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outcomes = []
    while proc.poll() is None:
        try:
            outcomes.append(compact_table(spark, pg_config, table)["status"])
        except Exception as exc:  # a run that met the appender's commit stops with nothing committed
            assert "nothing committed" in str(exc), exc
            outcomes.append("stopped")
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    assert out.count("appended") == batches and "committed" in outcomes
    spark.catalog.refreshTable(ref.sql().replace("`", ""))
    now = int(time.time() * 1000) + 1
    records, tc = read_model_records(spark, pg_config, table)
    assert {r.offset for r in records} >= {1000 + batches * 20 - 1}  # the last batch is there
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql()}").collect()}
    outcome = compact(records, Checkpoint.from_json(props.get("lakecleaner.checkpoint")), tc, now)
    compact_table(spark, pg_config, table, now_ms=now)
    assert record_ids(spark, ref) == sorted(r.id for r in outcome.survivors(records))
    # nothing appended was lost: every key's latest record is there (k0..k6, both partitions)
    latest = {}
    for i in [*range(40), *range(1000, 1000 + batches * 20)]:
        key = None if i < 40 and i % 13 == 5 else f"k{i % 7}"
        if key is not None:
            latest[(i % 2, key)] = i
    kept = {(r["partition"], r["key"]): r["offset"] for r in spark.table(ref.sql()).collect()}
    assert all(kept.get(k) == o for k, o in latest.items())


def test_two_cleaners_started_at_once_commit_once(spark, pg_config, tmp_path):
    import subprocess
    import sys

    table = f"pg{int(time.time() * 1000) % 10**8}.twice"
    ref = create_compacted_table(spark, pg_config, table)
    append(spark, ref, _rows(0, 60))
    now = int(time.time() * 1000) + 1
    records, tc = read_model_records(spark, pg_config, table)
    expected = sorted(r.id for r in compact(records, Checkpoint(), tc, now).survivors(records))
    config = _config_file(pg_config, tmp_path / "pg.yaml")
    assert CHECKPOINT_PROPERTY not in load_table_config(spark, pg_config, ref)[1]  # the table, cached here
    cmd = [sys.executable, "-m", "lakecleaner.cli", "--config", str(config), "compact", table, "--now-ms", str(now)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate() for p in procs]
    # what the other processes committed, read past this process's cache (no refresh asked for)
    assert CHECKPOINT_PROPERTY in load_table_config(spark, pg_config, ref)[1]
    spark.catalog.refreshTable(ref.sql().replace("`", ""))
    merges = spark.sql(f"SELECT count(*) AS n FROM {ref.meta('snapshots')} WHERE operation <> 'append'").collect()[0]["n"]
    assert merges == 1, results
    assert record_ids(spark, ref) == expected
    lines = [line for out, _ in results for line in out.splitlines() if '"status"' in line]
    assert len(lines) == 2 and sum('"committed"' in line for line in lines) >= 1
    for line in lines:  # the other stopped cleanly (nothing committed), or found nothing left to clean
        assert '"committed"' in line or "nothing committed" in line, line
    # a run here starts from the checkpoint they wrote: nothing left to read or remove
    stats = compact_table(spark, pg_config, table, now_ms=now)
    assert stats["dirty_records_in_run"] == 0 and stats["removed_superseded"] == 0
    assert record_ids(spark, ref) == expected
