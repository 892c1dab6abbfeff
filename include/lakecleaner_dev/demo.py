"""`make demo` (``python -m lakecleaner_dev.demo`` with include/ on the path): an embedded lakehouse with one table per strategy, compacted and checked.

Builds the tables from the producer-like generator, runs the compaction job on each, and prints,
per table, before and after: records, distinct keys, what was removed and why, and whether the
surviving records are exactly what the reference model of the rules says.
"""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

from lakecleaner.airflow.provider import DEFAULT_DAG_ID
from lakecleaner.core.config import load_config
from lakecleaner.core.table import TableRef
from lakecleaner_dev.generator import CDC_SCHEMA, cdc_rows, produce
from lakecleaner.core.model import compact
from lakecleaner.core.rules import Checkpoint
from lakecleaner_dev.tables import KAFKA_SCHEMA, append, create_compacted_table, read_model_records

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: its dags/, warehouse/ and airflow_home/
DEMO_CONFIG = Path(__file__).resolve().with_name("lakecleaner.yaml")  # the warehouse at <checkout>/warehouse
NAMESPACE = "demo"
DEMO_TABLES = {
    # table: (properties, schema, kind)
    "orders_offset": ({"compaction.strategy": "offset"}, KAFKA_SCHEMA, "kafka"),
    "prices_timestamp": ({"compaction.strategy": "timestamp"}, KAFKA_SCHEMA, "kafka"),
    "inventory_header": ({"compaction.strategy": "header", "compaction.strategy.header": "version"},
                         KAFKA_SCHEMA, "kafka"),
    # Iceberg format v3: its runs mask records with deletion vectors (the others, v2: position deletes)
    "customers_cdc": ({"compaction.strategy": "column", "compaction.strategy.column": "lsn",
                       "compaction.key.columns": "tenant,id", "compaction.value.column": "payload",
                       "format-version": "3"},
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


def describe(records) -> dict:
    """Records, distinct keys (keyless records aside) and tombstones of a table read as model records."""
    return {"records": len(records), "distinct_keys": len({r.key for r in records if r.key is not None}),
            "tombstones": sum(r.tombstone for r in records)}


def airflow_env(cfg) -> dict:
    """The environment `make airflow` uses, so the UI shows the demo's DAG run afterwards."""
    home = REPO_ROOT / "airflow_home"
    return {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type":"spark","host":"local[*]"}', "SPARK_LOCAL_IP": "127.0.0.1",
            "AIRFLOW__LAKECLEANER__CONFIG": str(Path(cfg.source).resolve()), "PYSPARK_PYTHON": sys.executable,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_dag(cfg, logical_date: dt.datetime) -> int:
    """One run of the lakecleaner DAG (`airflow dags test`): evaluate, then compact, maintain and
    validate each eligible table, packed into cleaner.threads Spark applications (spark-submit). Its log
    goes to airflow_home/demo-dag-run.log."""
    env = airflow_env(cfg)
    home = Path(env["AIRFLOW_HOME"])
    home.mkdir(exist_ok=True)
    log = home / "demo-dag-run.log"
    with log.open("w") as out:
        for cmd in ([sys.executable, "-m", "airflow", "db", "migrate"], [sys.executable, "-m", "airflow", "lakecleaner", "check"],
                    [sys.executable, "-m", "airflow", "dags", "test", DEFAULT_DAG_ID, logical_date.isoformat()]):
            code = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
            if code != 0:
                print(f"   `{' '.join(cmd[2:])}` exited {code}; see {log}")
                return code
    return 0


def main(args=None) -> int:
    from lakecleaner.core.evaluate import format_table
    from lakecleaner.core.history import read_history
    from lakecleaner.core.quality_results import list_results
    from lakecleaner.core.scheduler import evaluate_all
    from lakecleaner.spark.session import get_spark

    cfg = load_config(os.environ.get("LAKECLEANER_CONFIG") or DEMO_CONFIG)
    print(f"lakecleaner demo: catalog {cfg.catalog.name!r} ({cfg.catalog.type}) at {cfg.catalog.warehouse}")
    spark = get_spark(cfg, "lakecleaner-demo")
    t0 = time.time()
    tables, versions = build(spark, cfg, seed=getattr(args, "seed", 7))
    print(f"built {len(tables)} tables from several producers' streams in {time.time() - t0:.1f}s")
    before = {}
    for table in tables:  # what the rules say must survive, from the table as it is now
        records, tc = read_model_records(spark, cfg, table)
        props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {TableRef.parse(table, cfg.catalog.name).sql()}").collect()}
        before[table] = (records, tc, Checkpoint.from_json(props.get("lakecleaner.checkpoint")),
                         {**describe(records), "format": props.get("format-version", "?")})
    spark.stop()  # the DAG's Spark jobs run as their own applications

    logical = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=5)
    print("\nevaluation before the run (metadata only):\n" + format_table(evaluate_all(cfg, tables, int(logical.timestamp() * 1000))))
    time.sleep(max(0.0, logical.timestamp() - time.time()))
    print(f"\nrunning the lakecleaner DAG once (airflow dags test, logical date {logical.isoformat()}): "
          "evaluate -> one Spark application: compact -> maintain -> validate per table ...")
    t0 = time.time()
    code = run_dag(cfg, logical)
    print(f"DAG run finished in {time.time() - t0:.0f}s" + ("" if code == 0 else " with failures"))
    print("\nevaluation after the run:\n" + format_table(evaluate_all(cfg, tables)))

    spark = get_spark(cfg, "lakecleaner-demo")
    failures = int(code != 0)
    for table in tables:
        records, tc, ckpt, shape = before[table]
        runs = [r for r in read_history(cfg, table) if r["status"] == "committed"]
        if not runs:
            print(f"\n== {table}: no committed run")
            failures += 1
            continue
        stats = runs[0]
        expected = compact(records, ckpt, tc, stats["now_ms"])
        survivors, _ = read_model_records(spark, cfg, table)  # one read: ids, keys and tombstones
        got = sorted(r.id for r in survivors)
        ok = got == sorted(r.id for r in expected.survivors(records))
        failures += not ok
        after = describe(survivors)
        verdict = (list_results(cfg, table) or [{}])[0]
        print(f"\n== {table}  (strategy={tc.strategy}{', header=' + tc.version_header if tc.strategy == 'header' else ''}"
              f"{', column=' + tc.version_column if tc.strategy == 'column' else ''}, keys={','.join(tc.key_columns)}, "
              f"Iceberg format v{shape['format']})")
        print(f"   before: {shape['records']:>6} records {shape['distinct_keys']:>5} distinct keys {shape['tombstones']:>4} tombstones")
        print(f"   after:  {after['records']:>6} records {after['distinct_keys']:>5} distinct keys {after['tombstones']:>4} tombstones")
        print(f"   removed: {stats['removed_superseded']} superseded, {stats['removed_expired_tombstones']} expired tombstones; "
              f"{stats['quarantined']} keyless moved to {table}{cfg.cleaner.quarantine_suffix}; "
              f"{stats['anomalous']} anomalous versions; in {stats['duration_ms'] / 1000:.1f}s")
        note = {"offset": "arrival order beat the producers' order",
                "header": "a malformed version header loses, KIP-280"}.get(tc.strategy, "")
        print(f"   keys left at a stale version: {stale_keys(got, versions)}" + (f" ({note})" if note else ""))
        print(f"   rules check: {'OK, the survivors are exactly the reference model' if ok else 'MISMATCH'}")
        if verdict:
            failed = [r["rule"] for r in verdict["rules"] if not r["success"]]
            print(f"   data quality: {'PASSED' if verdict['success'] else 'FAILED'} ({len(verdict['rules'])} rules"
                  + (f"; not met: {', '.join(failed)}" if failed else "") + ")")
        else:
            print("   data quality: no verdict (validation did not run)")
    spark.stop()
    print("\ntombstones stay for delete.retention.ms (default 1 day) after the run that cleaned them, then go.")
    print(f"run history: {cfg.history_table}; data docs: {(list_results(cfg) or [{'docs': '-'}])[0]['docs']}")
    print("see it in the Airflow UI: `make airflow`, then http://localhost:8080 (user admin; the password is printed "
          "and written to airflow_home/simple_auth_manager_passwords.json.generated) -> Lake Cleaner")
    return 1 if failures else 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lakecleaner_dev.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=7, help="the generator's seed")
    sys.exit(main(parser.parse_args()))
