"""Building a SparkSession for the configured catalog (spark-submit arguments: lakecleaner.submit).

The Iceberg runtime jar is found at run time inside the pinned PyPI package; a deployment that
reaches Maven sets ``spark.iceberg_runtime`` to a coordinate instead (spark.jars.packages).
"""
from __future__ import annotations

import glob
import os
from pathlib import Path

from .config import LakecleanerConfig

RUNTIME_PACKAGE = "snowpark_connect_deps_iceberg"
RUNTIME_GLOB = "iceberg-spark-runtime-3.5_2.12-*.jar"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


class RuntimeJarNotFound(RuntimeError):
    pass


def iceberg_runtime_jar() -> str:
    try:
        import snowpark_connect_deps_iceberg as pkg
    except ImportError:
        raise RuntimeJarNotFound(
            f"{RUNTIME_PACKAGE} is not installed: pip install snowpark-connect-deps-iceberg==1.0.2, "
            "or set spark.iceberg_runtime to a Maven coordinate"
        ) from None
    jars = sorted(glob.glob(os.path.join(os.path.dirname(pkg.__file__), "jars", RUNTIME_GLOB)))
    if not jars:
        raise RuntimeJarNotFound(f"no {RUNTIME_GLOB} inside {pkg.__file__}")
    return jars[-1]


# JVM options of the cleaner's driver and executors. A run's dominant cost is probing every key of
# the table against a broadcast map of the run's keys: random reads into tens of MB, bound by
# memory latency. Transparent huge pages cut the TLB misses (the probe of 20M rows against 1M keys:
# 3.25 s -> 2.72 s), and the throughput collector suits these short batch jobs better than G1 (warm
# 20M-record runs: 6.6-8.1 s -> 5.7 s). Measured in benchmarks/, where the naive rewrite runs with
# the same options. IgnoreUnrecognizedVMOptions: the huge-page flag exists only in Linux JVMs.
JVM_OPTIONS = "-XX:+UseParallelGC -XX:+IgnoreUnrecognizedVMOptions -XX:+UseTransparentHugePages"


def spark_conf(cfg: LakecleanerConfig) -> dict[str, str]:
    conf = {
        "spark.sql.extensions": EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.ui.showConsoleProgress": "false",
        # Let Spark push a Bloom filter of the run's keys into the clean-part scan when the keys are
        # too many to broadcast (defaults only do so for scans over 10 GB).
        "spark.sql.optimizer.runtime.bloomFilter.enabled": "true",
        "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": "64MB",
        "spark.sql.optimizer.runtime.bloomFilter.creationSideThreshold": "512MB",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{Path(__file__).parent / 'log4j2.properties'} "
                                         f"{JVM_OPTIONS}",
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
        # Run-scoped caches (the offset map) live for one run: compressing them costs more CPU than
        # the memory it saves (building the 1M-key map of the 20M-record benchmark table: 1.52 s -> 1.35 s).
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.driver.memory": cfg.spark.driver_memory,
        "spark.redaction.regex": REDACTION,
    }
    if cfg.spark.iceberg_runtime == "auto":
        conf["spark.jars"] = iceberg_runtime_jar()
    else:
        conf["spark.jars.packages"] = cfg.spark.iceberg_runtime
    conf.update(cfg.catalog.spark_conf())
    conf.update({k: str(v) for k, v in cfg.spark.conf.items()})
    return conf


# Spark redacts conf values whose keys match this in its logs and UI; Spark's default misses the
# names catalogs give their secrets (credential, jdbc.password is caught, token is).
REDACTION = r"(?i)secret|password|token|access[.]key|credential|private[.]key"


def get_spark(cfg: LakecleanerConfig, app_name: str = "lakecleaner", set_master: bool = True):
    """A SparkSession for in-process use (tests, the demo). Under spark-submit, the master and jars
    come from the submit command line, so the job passes set_master=False."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # embedded default: stay on loopback
    builder = SparkSession.builder.appName(app_name)
    if set_master:
        builder = builder.master(cfg.spark.master)
    for key, value in spark_conf(cfg).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark

