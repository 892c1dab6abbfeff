"""The tests' spark-submits map Spark's classes from the class-data-sharing archive conftest made
(lakecleaner_dev.jvm_archive), and so does the session's own JVM, on the same C1-only options; one
that cannot use it still runs, and says nothing about it."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from lakecleaner.core.submit import spark_submit_binary
from lakecleaner_dev.jvm_archive import OPT_OUT_ENV, QUIET, TEST_JVM_OPTIONS, USE_ARCHIVE, archive_in, archive_key
from lakecleaner_dev.tables import append, create_compacted_table

pytestmark = pytest.mark.spark


def _submit_version(opts: str) -> subprocess.CompletedProcess:
    return subprocess.run([spark_submit_binary(), "--version"], env={**os.environ, "SPARK_SUBMIT_OPTS": opts},
                          capture_output=True, text=True, timeout=120)


def test_a_spark_submit_loads_sparks_classes_from_the_archive():
    opts = os.environ["SPARK_SUBMIT_OPTS"]
    archive = archive_in(opts)
    if os.environ.get(OPT_OUT_ENV) == "0":  # the run was asked to go without it
        assert archive is None, opts
        return
    assert archive, f"no archive in SPARK_SUBMIT_OPTS ({opts!r}): see the run's warnings for why"
    # -Xshare:on: the JVM refuses to start unless it maps the archive, whose classpath must match the driver's
    done = _submit_version(f"{opts} -Xshare:on -Xlog:class+load=info:stdout")
    assert done.returncode == 0, done.stderr[-2000:]
    shared = re.search(r"org\.apache\.spark\.deploy\.SparkSubmit source: shared objects file \(top\)", done.stdout)
    assert shared, done.stdout[-2000:]


def test_the_archive_is_made_anew_for_jars_installed_anew_at_the_same_path(tmp_path):
    """A fresh clone where an earlier one was gets a venv at the same path: the same Spark, new jar
    files. The old archive would not map (-Xshare:on refused to start), so its key must differ."""
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("spark-core.jar", "iceberg.jar"):
        (jars / name).write_bytes(b"PK")
    key = archive_key(jars)
    assert archive_key(jars) == key
    os.utime(jars / "spark-core.jar", ns=(10**18, 10**18))  # installed again: same name and size
    assert archive_key(jars) != key


def test_a_jvm_that_cannot_use_the_archive_runs_without_it_silently(tmp_path):
    done = _submit_version(f"{USE_ARCHIVE}{tmp_path / 'missing.jsa'} {QUIET}")
    assert done.returncode == 0 and "version 3.5" in done.stderr
    assert "cds" not in (done.stdout + done.stderr).lower()


def test_the_sessions_jvm_maps_the_archive_on_c1_with_the_tiered_code_cache(spark):
    """Started with the spark-submits' options: the archive, C1 only, a code cache C1 does not fill."""
    archive = archive_in(os.environ["SPARK_SUBMIT_OPTS"])
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert set(TEST_JVM_OPTIONS.split()) <= set(arguments), arguments
    diagnostic = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    in_effect = {name: diagnostic.getVMOption(name).getValue() for name in ("TieredStopAtLevel", "ReservedCodeCacheSize")}
    assert in_effect == {"TieredStopAtLevel": "1", "ReservedCodeCacheSize": str(240 * 2**20)}, in_effect
    if os.environ.get(OPT_OUT_ENV) == "0":
        assert not any(a.startswith(USE_ARCHIVE) for a in arguments), arguments
        return
    assert archive and f"{USE_ARCHIVE}{archive}" in arguments, arguments


def test_the_sessions_tables_are_written_without_checksum_files(spark, lake_config, table_name):
    """The tests' session writes no Hadoop .crc file beside a table's files (conftest: each costs
    two chmod forks); the files themselves are all there."""
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, [{"key": "k", "offset": 0, "partition": 0, "value": "v"}])
    written = [p for p in (Path(lake_config.catalog.warehouse) / table_name.replace(".", "/")).rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in written) and any(p.name.endswith(".metadata.json") for p in written)
    assert not [p for p in written if p.name.endswith(".crc")], written
