"""The CLI's compaction job on a real Spark standalone cluster (master + worker on 127.0.0.1): the package
reaches the executors through --py-files, not through the driver's environment; one application for
several tables, a missing one among them contained (its line, exit 1)."""
import json
import subprocess
import urllib.request
import sys
import time

import pytest

from lakecleaner.core.model import compact
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.scheduler import run_history
from lakecleaner_dev.tables import append, create_compacted_table, read_model_records

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _cluster_apps(cluster) -> list[str]:
    state = json.load(urllib.request.urlopen(f"{cluster['ui']}/json/", timeout=5))
    return [a["name"] for a in state.get("completedapps", []) + state.get("activeapps", [])]


def test_one_cluster_application_compacts_several_tables_and_contains_a_failing_one(
        spark, lake_config, spark_cluster, tmp_path, table_name):
    tables = [f"{table_name}_a", f"{table_name}_missing", f"{table_name}_b"]
    refs = {}
    for table, strategy in ((tables[0], "timestamp"), (tables[2], "offset")):
        refs[table] = ref = create_compacted_table(spark, lake_config, table, {"compaction.strategy": strategy})
        append(spark, ref, [{"key": f"k{i % 7}", "offset": i, "partition": i % 2, "timestamp": (i * 37) % 11,
                             "value": f"v{i}"} for i in range(200)])
    now = int(time.time() * 1000)  # after the appends: records appended after a run's now wait for the next
    expected = {}
    for table in refs:
        records, tc = read_model_records(spark, lake_config, table)
        expected[table] = sorted(r.id for r in compact(records, Checkpoint(), tc, now).survivors(records))
        assert len(expected[table]) < len(records)  # the run has something to remove
    config = tmp_path / "cluster.yaml"
    config.write_text(f"catalog:\n  warehouse: {lake_config.catalog.warehouse}\n"
                      f"spark:\n  master: {spark_cluster['url']}\n  driver_memory: 1g\n"
                      "  conf: {spark.executor.memory: 1g, spark.executor.cores: '1'}\n")
    before = _cluster_apps(spark_cluster).count("lakecleaner-compact")
    out = subprocess.run([sys.executable, "-m", "lakecleaner.cli", "--config", str(config), "compact", *tables,
                          "--now-ms", str(now)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]  # the missing table failed
    results = [json.loads(line) for line in out.stdout.strip().splitlines()]
    assert [(r["table"], r["status"]) for r in results] == [
        (tables[0], "committed"), (tables[1], "failed"), (tables[2], "committed")]
    assert results[1]["error"].startswith(f"table {tables[1]}: cannot load table")
    assert results[0]["removed_superseded"] > 0 and results[2]["removed_superseded"] > 0
    # read without Spark: the test session's catalog caches run_history, which another JVM just appended to
    runs = run_history(lake_config, tables=[tables[0], tables[2]])
    assert sorted(r["table_name"] for r in runs if r["status"] == "committed") == [tables[0], tables[2]]
    for table, ref in refs.items():
        spark.catalog.refreshTable(ref.sql().replace("`", ""))
        assert sorted((r["partition"], r["offset"]) for r in spark.table(ref.sql()).collect()) == expected[table]
    # it ran on the cluster, not in a local JVM, as one application for all three tables
    assert _cluster_apps(spark_cluster).count("lakecleaner-compact") == before + 1
