"""`make demo`: an embedded lakehouse with one table per strategy, compacted and checked.

Builds the tables from the producer-like generator, runs the compaction job on each, and prints,
per table, before and after: records, distinct keys, what was removed and why, and whether the
surviving records are exactly what the reference model of the rules says.
"""
from __future__ import annotations

import json
import time

from .config import load_config
from .engine import TableRef, compact_table
from .generator import CDC_SCHEMA, cdc_rows, produce
from .model import compact
from .rules import Checkpoint
from .tables import KAFKA_SCHEMA, append, create_compacted_table, read_model_records

NAMESPACE = "demo"
DEMO_TABLES = {
    # table: (properties, schema, kind)
    "orders_offset": ({"compaction.strategy": "offset"}, KAFKA_SCHEMA, "kafka"),
    "prices_timestamp": ({"compaction.strategy": "timestamp"}, KAFKA_SCHEMA, "kafka"),
    "inventory_header": ({"compaction.strategy": "header", "compaction.strategy.header": "version"},
                         KAFKA_SCHEMA, "kafka"),
    "customers_cdc": ({"compaction.strategy": "column", "compaction.strategy.column": "lsn",
                       "compaction.key.columns": "tenant,id", "compaction.value.column": "payload"},
                      CDC_SCHEMA, "cdc"),
}


def build(spark, cfg, seed: int = 7, n_records: int = 6000, n_keys: int = 800) -> tuple[list[str], dict]:
    """The tables, and each record's producer version by (partition, offset) for the staleness check."""
    batches = produce(n_records, n_keys, partitions=2, seed=seed)
    versions = {(r["partition"], r["offset"]): (r["key"], r["ver"]) for b in batches for r in b}
    tables = []
    for name, (props, schema, kind) in DEMO_TABLES.items():
        table = f"{NAMESPACE}.{name}"
        ref = create_compacted_table(spark, cfg, table, props, schema=schema)
        spark.sql(f"DROP TABLE IF EXISTS {ref.sql('__quarantine')} PURGE")
        rows = cdc_rows(batches) if kind == "cdc" else [[{k: v for k, v in r.items() if k != "ver"} for r in b]
                                                          for b in batches]
        for batch in rows:
            append(spark, ref, batch, schema)
        tables.append(table)
    return tables, versions


def stale_keys(survivors, versions: dict) -> int:
    """Keys whose surviving record is not the producers' latest write: what offset order gets wrong."""
    latest: dict = {}
    for key, ver in versions.values():
        if key is not None:
            latest[key] = max(latest.get(key, 0), ver)
    return sum(1 for pid in survivors if pid in versions and versions[pid][1] < latest[versions[pid][0]])


def describe(spark, cfg, table: str) -> dict:
    from pyspark.sql import functions as F

    ref = TableRef.parse(table, cfg.catalog.name)
    records, tc = read_model_records(spark, cfg, table)
    df = spark.table(ref.sql())
    keys = [F.col(f"`{k}`") for k in tc.key_columns]
    has_key = F.lit(True)
    for k in keys:
        has_key = has_key & k.isNotNull()
    row = df.agg(F.count("*").alias("n"),
                 F.countDistinct(F.when(has_key, F.struct(*keys))).alias("keys")).collect()[0]
    return {"records": row["n"], "distinct_keys": row["keys"], "tombstones": sum(r.tombstone for r in records)}


def main(args=None) -> int:
    from .spark import get_spark

    cfg = load_config()
    print(f"lakecleaner demo: catalog {cfg.catalog.name!r} ({cfg.catalog.type}) at {cfg.catalog.warehouse}")
    spark = get_spark(cfg, "lakecleaner-demo")
    seed = getattr(args, "seed", 7)
    t0 = time.time()
    tables, versions = build(spark, cfg, seed=seed)
    print(f"built {len(tables)} tables from {len(DEMO_TABLES)} producers' streams in {time.time() - t0:.1f}s\n")
    failures = 0
    for table in tables:
        ref = TableRef.parse(table, cfg.catalog.name)
        before = describe(spark, cfg, table)
        records, tc = read_model_records(spark, cfg, table)
        props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql()}").collect()}
        now = int(time.time() * 1000)
        expected = compact(records, Checkpoint.from_json(props.get("lakecleaner.checkpoint")), tc, now)
        stats = compact_table(spark, cfg, table, now_ms=now)
        after = describe(spark, cfg, table)
        got = sorted((r[0], r[1]) for r in spark.table(ref.sql()).select(
            f"`{tc.partition_column}`" if tc.partition_column else "null", f"`{tc.offset_column}`").collect())
        want = sorted(r.id for r in expected.survivors(records))
        ok = got == want
        failures += not ok
        print(f"== {table}  (strategy={tc.strategy}{', header=' + tc.version_header if tc.strategy == 'header' else ''}"
              f"{', column=' + tc.version_column if tc.strategy == 'column' else ''}, keys={','.join(tc.key_columns)})")
        print(f"   before: {before['records']:>6} records {before['distinct_keys']:>5} distinct keys "
              f"{before['tombstones']:>4} tombstones")
        print(f"   after:  {after['records']:>6} records {after['distinct_keys']:>5} distinct keys "
              f"{after['tombstones']:>4} tombstones")
        print(f"   removed: {stats['removed_superseded']} superseded, {stats['removed_expired_tombstones']} expired "
              f"tombstones; {stats['quarantined']} keyless moved to {ref.short}__quarantine; "
              f"{stats['anomalous']} anomalous versions; {stats['bytes_written']} bytes of delete files "
              f"in {stats['duration_ms'] / 1000:.1f}s")
        note = {"offset": "arrival order beat the producers' order",
                "header": "a malformed version header loses, KIP-280"}.get(tc.strategy, "")
        print(f"   keys left at a stale version: {stale_keys(got, versions)}" + (f" ({note})" if note else ""))
        print(f"   rules check: {'OK, the survivors are exactly the reference model' if ok else 'MISMATCH'} "
              f"({len(want)} records)")
        print(f"   {json.dumps({k: stats[k] for k in ('records_read', 'records_kept', 'checkpoint')})}\n")
    print("tombstones stay for delete.retention.ms (default 1 day) after the run that cleaned them, then go;")
    print(f"run history: {cfg.history_table}; compact one table yourself: lakecleaner compact {tables[0]}")
    spark.stop()
    return 1 if failures else 0
