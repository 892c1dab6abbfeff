"""The Spark conf of every lakecleaner application: the Iceberg runtime jar (found inside the pinned PyPI
package, a Maven coordinate, or provided by the cluster) and the config's extra jars and packages, the
JVM options and the catalog's conf. Pure: the CLI and the Airflow
face render spark-submit command lines from it without importing Spark (lakecleaner.core.submit)."""
from __future__ import annotations

import glob
import os
import re
from importlib.resources import files

from lakecleaner.core.config import RUNTIME_AUTO, RUNTIME_PROVIDED, LakecleanerConfig

RUNTIME_PACKAGE = "snowpark_connect_deps_iceberg"
RUNTIME_GLOB = "iceberg-spark-runtime-3.5_2.12-*.jar"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# Python rows reach the JVM through Arrow (spark.frames.local_frame), not through Python workers.
ARROW_ENABLED = "spark.sql.execution.arrow.pyspark.enabled"
# An application's shuffle partitions: this many for a large table; an application of small tables
# takes fewer (lakecleaner.spark.batch.SMALL_TABLE_CONF).
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
SHUFFLE_PARTITIONS_DEFAULT = 8


# The driver's log4j configuration: a file of the installed package (the JVM reads it by path).
LOG4J_PROPERTIES = files("lakecleaner") / "resources" / "log4j2.properties"


class RuntimeJarNotFound(RuntimeError):
    pass


def iceberg_runtime_jar() -> str:
    try:
        import snowpark_connect_deps_iceberg as pkg
    except ImportError:
        raise RuntimeJarNotFound(
            f"{RUNTIME_PACKAGE} is not installed: pip install snowpark-connect-deps-iceberg==1.0.2, "
            "or set spark.iceberg_runtime to a Maven coordinate, or to provided where the cluster has Iceberg"
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


def jars_and_packages(cfg: LakecleanerConfig) -> dict[str, str]:
    """spark.jars and spark.jars.packages: the Iceberg runtime's jar (auto) or package (a Maven
    coordinate), or nothing (provided: the cluster has Iceberg), then the config's extra_jars and
    extra_packages. Only the lists that are not empty."""
    jars, packages = list(cfg.spark.extra_jars), list(cfg.spark.extra_packages)
    if cfg.spark.iceberg_runtime == RUNTIME_AUTO:
        jars.insert(0, iceberg_runtime_jar())
    elif cfg.spark.iceberg_runtime != RUNTIME_PROVIDED:
        packages.insert(0, cfg.spark.iceberg_runtime)
    return {key: ",".join(values) for key, values in (("spark.jars", jars), ("spark.jars.packages", packages))
            if values}


def spark_conf(cfg: LakecleanerConfig) -> dict[str, str]:
    conf = {
        "spark.sql.extensions": EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        ARROW_ENABLED: "true",
        "spark.ui.enabled": "false",
        SHUFFLE_PARTITIONS: str(SHUFFLE_PARTITIONS_DEFAULT),
        "spark.ui.showConsoleProgress": "false",
        # Let Spark push a Bloom filter of the run's keys into the clean-part scan when the keys are
        # too many to broadcast (defaults only do so for scans over 10 GB).
        "spark.sql.optimizer.runtime.bloomFilter.enabled": "true",
        "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": "64MB",
        "spark.sql.optimizer.runtime.bloomFilter.creationSideThreshold": "512MB",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J_PROPERTIES} "
                                         f"{JVM_OPTIONS}",
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
        # Run-scoped caches (the offset map) live for one run: compressing them costs more CPU than
        # the memory it saves (building the 1M-key map of the 20M-record benchmark table: 1.52 s -> 1.35 s).
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.driver.memory": cfg.spark.driver_memory,
        REDACTION_KEY: REDACTION,
    }
    conf.update(jars_and_packages(cfg))
    conf.update(cfg.catalog.spark_conf())
    conf.update({k: str(v) for k, v in cfg.spark.conf.items()})
    return conf


# Spark redacts a conf value in its logs, UI and event log when its key or its value matches this;
# Spark's default misses the names catalogs and file systems give their secrets (credential,
# private.key, Azure's account.key and .sas. keys, S3A's encryption.key for SSE-C, API keys, and a
# PASSWD an environment variable may be named; jdbc.password and token it catches).
REDACTION = (r"(?i)secret|password|passwd|token|access[.]key|credential|private[.]key|account[.]key|[.]sas[.]"
             r"|encryption[.]key|api[._-]?key")
REDACTION_KEY = "spark.redaction.regex"  # its value matches the pattern, and is no secret


# Settings whose names match REDACTION but whose values only name where a secret is (a Kubernetes
# secret to mount or read an environment variable from, a Hadoop credential store): what cluster mode
# gives its driver secrets with, so they must reach spark-submit.
REFERENCE_KEYS = re.compile(r"spark[.]kubernetes[.](driver|executor)[.](secretKeyRef|secrets)[.].+"
                            r"|.*[.]credential[.]provider[.]path")


def is_secret(key: str, value: str) -> bool:
    """Whether Spark would redact this setting (its key or its value matches REDACTION), and it is more
    than a reference to a secret: such a value never goes on a command line or into the DAG's task
    arguments (lakecleaner.core.submit)."""
    if key == REDACTION_KEY or REFERENCE_KEYS.fullmatch(key):
        return False
    return bool(re.search(REDACTION, key) or re.search(REDACTION, str(value)))
