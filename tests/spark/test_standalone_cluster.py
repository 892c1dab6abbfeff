"""The compaction job on a real Spark standalone cluster (master + worker on 127.0.0.1): the package
reaches the executors through --py-files, not through the driver's environment."""
import json
import subprocess
import urllib.request
import sys
import time

import pytest

from lakecleaner.model import compact
from lakecleaner.rules import Checkpoint
from lakecleaner.tables import append, create_compacted_table, read_model_records

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_compaction_on_a_standalone_cluster(spark, lake_config, spark_cluster, tmp_path, table_name):
    ref = create_compacted_table(spark, lake_config, table_name, {"compaction.strategy": "timestamp"})
    append(spark, ref, [{"key": f"k{i % 7}", "offset": i, "partition": i % 2, "timestamp": (i * 37) % 11,
                         "value": f"v{i}"} for i in range(200)])
    records, tc = read_model_records(spark, lake_config, table_name)
    now = int(time.time() * 1000)
    expected = sorted(r.id for r in compact(records, Checkpoint(), tc, now).survivors(records))
    config = tmp_path / "cluster.yaml"
    config.write_text(f"catalog:\n  warehouse: {lake_config.catalog.warehouse}\n"
                      f"spark:\n  master: {spark_cluster['url']}\n  driver_memory: 1g\n"
                      "  conf: {spark.executor.memory: 1g, spark.executor.cores: '1'}\n")
    out = subprocess.run([sys.executable, "-m", "lakecleaner.cli", "--config", str(config), "compact", table_name,
                          "--now-ms", str(now)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert stats["status"] == "committed" and stats["removed_superseded"] > 0
    spark.catalog.refreshTable(ref.sql().replace("`", ""))
    got = sorted((r["partition"], r["offset"]) for r in spark.table(ref.sql()).collect())
    assert got == expected
    state = json.load(urllib.request.urlopen(f"{spark_cluster['ui']}/json/", timeout=5))
    apps = [a["name"] for a in state.get("completedapps", []) + state.get("activeapps", [])]
    assert "lakecleaner-compact" in apps, state  # it ran on the cluster, not in a local JVM
