"""Four fixed costs every run and every test pays, measured on purpose (issue 38):

- **rows to the JVM**: a few Python rows (a run-history row, a run's file times, a test's append) as a
  DataFrame, by PySpark's own ``createDataFrame`` from a list (its rows are re-pickled in Python
  workers) against ``spark.frames.local_frame`` (Arrow, read by the JVM as a local relation). CPU of
  the whole process tree (driver, JVM, pyspark.daemon) per call, medians of rounds of calls on one
  warm session, the two ways taking turns;
- **maintenance's rewrite** of a small table just compacted, with and without Iceberg's
  remove-dangling-deletes pass (``spark.iceberg_ops.DELETES_OUT``), on the same warm session, each
  way on a fresh table in turns; CPU of the process tree per rewrite;
- **a spark-submit's JVM** with and without the tests' class-data-sharing archive
  (``lakecleaner_dev.jvm_archive``): the warm-up application (an Iceberg table, two appends, a
  compaction) submitted alternately each way; machine busy time and wall time per submit;
- **a driver's imports** on the path spark-submit gives it (the package zip, Spark's pyspark.zip and
  py4j zip first): what a clean application imports before its first table (the batch, the quality
  suites, great_expectations), in a fresh Python each time, with and without
  ``lakecleaner.spark.startup.prefer_installed_pyspark`` (the installed, byte-compiled pyspark
  instead of the zip's source), taking turns; CPU of that Python.

Usage: python benchmarks/bench_overheads.py [--calls 20] [--rounds 5] [--rewrites 7] [--submits 3] [--imports 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from lakecleaner.core.config import CatalogConfig, LakecleanerConfig, SparkConfig
from lakecleaner.core.submit import submit_options
from lakecleaner_dev import jvm_archive
from lakecleaner_dev.tables import KAFKA_SCHEMA

RESULTS = Path(__file__).parent / "results" / "overheads.json"


def tree_cpu() -> float:
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


def machine_busy() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq


def in_one_session(calls: int, rounds: int, rewrites: int) -> tuple[dict[str, float], dict[str, float]]:
    """rows_to_jvm and maintenance_rewrite on one warm session."""
    from lakecleaner.spark.session import get_spark

    with tempfile.TemporaryDirectory() as workdir:
        cfg = LakecleanerConfig(catalog=CatalogConfig(name="lake", type="hadoop", warehouse=f"{workdir}/wh"),
                                spark=SparkConfig(master="local[2]", driver_memory="1g"))
        spark = get_spark(cfg, "bench-overheads")
        try:
            return rows_to_jvm(spark, calls, rounds), maintenance_rewrite(spark, cfg, rewrites)
        finally:
            spark.stop()


def maintenance_rewrite(spark, cfg: LakecleanerConfig, rewrites: int) -> dict[str, float]:
    """CPU s of maintenance's rewrite (rewrite_data_files of the clean part's files carrying deletes)
    right after a compaction of a small two-partition table, with and without Iceberg's
    remove-dangling-deletes pass (iceberg_ops.DELETES_OUT), each on a fresh table, taking turns."""
    from lakecleaner.spark.batch import SMALL_TABLE_CONF, restore_session_conf, set_session_conf
    from lakecleaner.spark.engine import compact_table
    from lakecleaner.spark.iceberg_ops import Rewrite, rewrite_data_files
    from lakecleaner.spark.maintenance import CLEAN_PART_DELETES_OUT
    from lakecleaner_dev.tables import append, create_compacted_table

    previous = set_session_conf(spark, SMALL_TABLE_CONF)  # as an application runs a small table
    ways = {"without": CLEAN_PART_DELETES_OUT, "with": {**CLEAN_PART_DELETES_OUT, "remove-dangling-deletes": "true"}}
    figures: dict[str, list[float]] = {way: [] for way in ways}
    for i in range(rewrites + 1):  # the first round warms both paths
        for way, options in ways.items():
            table = f"bench.rewrite_{way}_{i}"
            ref = create_compacted_table(spark, cfg, table, {"min.compaction.lag.ms": "0"})
            for start in (0, 24):
                append(spark, ref, [{"key": f"k{n % 6}", "offset": n, "partition": n % 2, "value": f"v{n}"}
                                    for n in range(start, start + 24)])
            compact_table(spark, cfg, table)
            before = tree_cpu()
            rewrite_data_files(spark, ref, Rewrite(options))
            if i:
                figures[way].append(tree_cpu() - before)
    restore_session_conf(spark, previous)
    return {way: statistics.median(v) for way, v in figures.items()}


def rows_to_jvm(spark, calls: int, rounds: int) -> dict[str, float]:
    from pyspark.sql.types import _parse_datatype_string

    from lakecleaner.spark.frames import local_frame

    schema = _parse_datatype_string(KAFKA_SCHEMA)
    rows = [(f"k{i}", i, i % 2, 1000 + i, [{"key": "v", "value": b"\x01"}], i == 5, None if i == 5 else f"v{i}")
            for i in range(6)]
    ways = {"createDataFrame": lambda: spark.createDataFrame(rows, schema).count(),
            "local_frame": lambda: local_frame(spark, rows, schema).count()}
    for way in ways.values():  # warm both paths (the Python workers, Arrow's imports)
        for _ in range(3):
            way()
    per_call: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            before = tree_cpu()
            for _ in range(calls):
                way()
            per_call[name].append((tree_cpu() - before) / calls)
    return {name: statistics.median(v) for name, v in per_call.items()}


def submit_jvm(submits: int) -> dict[str, dict[str, float]]:
    cache = Path(tempfile.mkdtemp(prefix="bench-jvm-archive-"))
    opts, problem = jvm_archive.archive_options(cache, jvm_archive.TEST_JVM_OPTIONS)
    if problem:
        raise SystemExit(problem)
    figures: dict[str, dict[str, list[float]]] = {w: {"cpu_s": [], "wall_s": []} for w in ("without", "with")}
    for _ in range(submits):
        for way, options in (("without", jvm_archive.TEST_JVM_OPTIONS), ("with", opts)):
            with tempfile.TemporaryDirectory() as workdir:
                cfg = jvm_archive.warm_up_config(workdir)
                cmd = submit_options(cfg, None).command(cfg.spark.master, "bench", jvm_archive.__file__, [workdir])
                busy, start = machine_busy(), time.monotonic()
                subprocess.run(cmd, env={"PYSPARK_PYTHON": sys.executable, **os.environ, "SPARK_SUBMIT_OPTS": options},
                               capture_output=True, check=True)
                figures[way]["cpu_s"].append(machine_busy() - busy)
                figures[way]["wall_s"].append(time.monotonic() - start)
    for archive in cache.iterdir():
        archive.unlink()
    cache.rmdir()
    return {way: {k: statistics.median(v) for k, v in f.items()} for way, f in figures.items()}


DRIVER_IMPORTS = """
import sys
if sys.argv[1] == "preferred":
    from lakecleaner.spark.startup import prefer_installed_pyspark
    assert prefer_installed_pyspark()
import lakecleaner.spark.batch, lakecleaner.spark.quality, great_expectations
"""


def driver_imports(runs: int) -> dict[str, float]:
    """CPU s of a driver's imports, spark-submit's path, median of ``runs`` each way (alternating)."""
    import importlib.util
    import resource

    from lakecleaner.core.submit import package_zip

    spark_lib = Path(importlib.util.find_spec("pyspark").origin).parent / "python" / "lib"
    figures: dict[str, list[float]] = {"zip": [], "preferred": []}
    with tempfile.TemporaryDirectory() as workdir:
        path = os.pathsep.join([package_zip(workdir), str(spark_lib / "pyspark.zip"),
                                *map(str, spark_lib.glob("py4j-*.zip"))])
        for _ in range(runs):
            for way in figures:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run([sys.executable, "-c", DRIVER_IMPORTS, way], check=True, cwd=workdir,
                               env={**os.environ, "PYTHONPATH": path})
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                figures[way].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return {way: statistics.median(v) for way, v in figures.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--submits", type=int, default=3)
    p.add_argument("--imports", type=int, default=5)
    p.add_argument("--rewrites", type=int, default=7)
    a = p.parse_args()
    rows, rewrite = in_one_session(a.calls, a.rounds, a.rewrites)
    print(f"rows to the JVM, CPU s per call (median of {a.rounds} rounds of {a.calls}): "
          + ", ".join(f"{k} {v:.3f}" for k, v in rows.items())
          + f"; ratio {rows['local_frame'] / rows['createDataFrame']:.2f}")
    print(f"maintenance's rewrite of a small table (median of {a.rewrites}): {rewrite['without']:.2f} CPU s, with "
          f"Iceberg's remove-dangling-deletes pass {rewrite['with']:.2f}; ratio {rewrite['without'] / rewrite['with']:.2f}")
    jvm = submit_jvm(a.submits)
    print(f"a spark-submit (median of {a.submits}): " + "; ".join(
        f"{way} the archive {f['cpu_s']:.1f} CPU s, {f['wall_s']:.1f} s wall" for way, f in jvm.items())
        + f"; CPU ratio {jvm['with']['cpu_s'] / jvm['without']['cpu_s']:.2f}")
    imports = driver_imports(a.imports)
    print(f"a driver's imports (median of {a.imports}): from the zip {imports['zip']:.2f} CPU s, the installed "
          f"pyspark preferred {imports['preferred']:.2f}; ratio {imports['preferred'] / imports['zip']:.2f}")
    RESULTS.parent.mkdir(exist_ok=True)
    with RESULTS.open("a") as out:
        out.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows_to_jvm_cpu_s": rows,
                              "maintenance_rewrite_cpu_s": rewrite,
                              "spark_submit": jvm, "driver_imports_cpu_s": imports}) + "\n")


if __name__ == "__main__":
    main()
