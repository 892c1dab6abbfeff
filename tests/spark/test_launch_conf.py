"""The private properties file (lakecleaner.core.launch) as a real spark-submit reads it: every value
arrives as written (escapes, UTF-8, a literal ${), spark-defaults.conf still applies and loses to
ours, and the driver's config takes the catalog record over its YAML while its session leaves the
catalog the launch conf brought (lakecleaner.spark.session)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lakecleaner.core import launch
from lakecleaner.core.catalog_connection import LAUNCH_KEY, launch_record
from lakecleaner.core.config import CatalogProperties
from lakecleaner.core.submit import spark_submit_binary

pytestmark = pytest.mark.spark

APP = """
import json, sys
from lakecleaner.spark.session import get_spark, job_config, launch_conf
launched = launch_conf()
cfg = job_config(sys.argv[1], launched)
spark = get_spark(cfg, "launch-test", set_master=False, launched=launched)
conf = dict(spark.sparkContext.getConf().getAll())
print("RESULT " + json.dumps({"launched": launched, "session": conf, "warehouse": cfg.catalog.warehouse,
                              "pyiceberg": cfg.catalog.pyiceberg_properties_resolved()}))
spark.stop()
"""
TRICKY = "a=b:c#d!e \\\\ f\tg\nh é€ ${NOT_A_VARIABLE} end"


def test_spark_reads_the_private_properties_file_as_written(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text(
        "spark.lakecleaner.test.default  from-defaults\nspark.lakecleaner.test.both  from-defaults\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    config = tmp_path / "lake.yaml"
    config.write_text(f"catalog:\n  name: lake\n  type: sql\n  warehouse: file://{tmp_path}/yaml-wh\n"
                      "  spark_properties: {uri: 'jdbc:postgresql://from-yaml/x', jdbc.schema-version: V1}\n")
    given = CatalogProperties(warehouse=f"file://{tmp_path}/conn-wh",
                              properties={"uri": "jdbc:postgresql://from-launch:5432/x", "jdbc.user": "u",
                                          "jdbc.password": TRICKY})
    private = {"spark.lakecleaner.test.tricky": TRICKY, "spark.lakecleaner.test.both": "ours",
               "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
               "spark.sql.catalog.lake.uri": "jdbc:postgresql://from-launch:5432/x",
               LAUNCH_KEY: launch_record(given, cluster=False)[0]}
    (tmp_path / "app.py").write_text(APP)
    with launch.properties_file(private) as path:
        done = subprocess.run([spark_submit_binary(), "--master", "local[1]", "--properties-file", path,
                               "--conf", "spark.ui.enabled=false", str(tmp_path / "app.py"), str(config)],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    got = json.loads(line[len("RESULT "):])
    assert got["launched"]["spark.lakecleaner.test.tricky"] == TRICKY
    assert got["launched"]["spark.lakecleaner.test.default"] == "from-defaults"  # spark-defaults.conf still read
    assert got["launched"]["spark.lakecleaner.test.both"] == "ours"  # and ours win over it
    # the record over the YAML: the connection's warehouse and uri; the YAML's own property kept
    assert got["warehouse"] == f"file://{tmp_path}/conn-wh"
    assert got["pyiceberg"]["uri"].startswith("postgresql+psycopg2://u:a%3Db%3Ac%23d%21e%20")
    # the session keeps the catalog the launch brought (not the YAML's uri)
    assert got["session"]["spark.sql.catalog.lake.uri"] == "jdbc:postgresql://from-launch:5432/x"
    assert "spark.sql.catalog.lake.jdbc.schema-version" not in got["session"]
    assert got["session"]["spark.sql.session.timeZone"] == "UTC"  # the cleaner's own conf is set
    assert TRICKY not in " ".join(sys.argv)


def test_a_jvm_class_named_again_is_not_looked_up_again(spark):
    """The session's py4j keeps what each name resolved to (session.memoize_jvm_lookups): PySpark
    names classes on every call, and each lookup is a class-loader search through Spark's jars."""
    client = spark._jvm._gateway_client
    sent, send = [], client.send_command
    client.send_command = lambda command, *args, **kw: sent.append(command) or send(command, *args, **kw)
    try:
        first = spark._jvm.org.apache.spark.util.SizeEstimator
        asked_first = len(sent)
        again = spark._jvm.org.apache.spark.util.SizeEstimator
        asked_again = len(sent) - asked_first
        functions = [spark._jvm.functions for _ in range(3)]
    finally:
        del client.send_command
    assert asked_first >= 1 and asked_again == 0 and again is first
    assert len(sent) - asked_first <= 1 and functions[0] is functions[2]
    assert first.estimate("x") > 0  # the kept class still works
