"""The SparkSession of an application (and of tests and the demo) on the configured catalog; its
conf is lakecleaner.core.sparkconf's, the same a spark-submit command line carries.

An application the DAG submits with its catalog from an Airflow connection learns that catalog from
the conf spark-submit hands it (``launch_conf``), not from its YAML: the connection's record
(catalog_connection.LAUNCH_KEY) is merged over the YAML's catalog section (``job_config``), and a
catalog already in the launch conf (client mode: the submitting task's private properties file) is
not overwritten by the session (``get_spark``)."""
from __future__ import annotations

import os

from pyspark.sql import SparkSession

from lakecleaner.core.catalog_connection import LAUNCH_KEY, from_launch_record
from lakecleaner.core.config import LakecleanerConfig, load_config
from lakecleaner.core.sparkconf import spark_conf


def launch_conf() -> dict[str, str]:
    """The conf spark-submit handed this driver (its --conf and --properties-file), read before any
    session exists; empty outside spark-submit (in-process sessions: tests, the demo)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # set by spark-submit's PythonRunner only
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's JVM, whose system properties hold the conf
    return dict(SparkConf().getAll())


def job_config(config: str, launched: dict[str, str] | None = None) -> LakecleanerConfig:
    """An application's config: the YAML (a path, or a document handed over whole) with the catalog
    record of the launch conf, if any, merged over its catalog section; that record's ${NAME}
    references (cluster mode) are read from this driver's environment."""
    launched = launch_conf() if launched is None else launched
    cfg = load_config(config)
    record = launched.get(LAUNCH_KEY)
    return cfg if record is None else cfg.with_catalog(from_launch_record(record, os.environ))


def get_spark(cfg: LakecleanerConfig, app_name: str = "lakecleaner", set_master: bool = True,
              launched: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession for in-process use (tests, the demo). Under spark-submit, the master and jars
    come from the submit command line, so the job passes set_master=False; a catalog the launch conf
    already holds is left as it is."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # embedded default: stay on loopback
    memoize_jvm_lookups()
    launched = launch_conf() if launched is None else launched
    prefix = f"spark.sql.catalog.{cfg.catalog.name}"
    brought = prefix in launched
    builder = SparkSession.builder.appName(app_name)
    if set_master:
        builder = builder.master(cfg.spark.master)
    for key, value in spark_conf(cfg).items():
        if brought and (key == prefix or key.startswith(prefix + ".")):
            continue
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def memoize_jvm_lookups() -> None:
    """Keep each class and package py4j found by name, instead of asking the JVM again every time.

    PySpark names JVM classes on every call (``sc._jvm.functions`` for each column function,
    ``_jvm.org.apache.spark.sql.types.StructType`` for each schema, ``_jvm.PythonUtils``...), and py4j
    answers each by trying the name against the view's imports and then each package along a
    dotted name: every miss a class-loader search through all of Spark's jars. A run of small
    tables asks tens of thousands of times (the hand-worked cases in one session: 21,207 lookups;
    memoized, that session took 79-82 instead of 88-98 CPU s). py4j has no such cache of its own
    (0.10.9). What a name resolved to stays right as long as the JVM's classpath and the view's
    imports are fixed once the session exists, as in every lakecleaner process (no ``ADD JAR``, no
    ``java_import`` later)."""
    from py4j.java_gateway import JavaClass, JavaPackage, JVMView

    for view in (JVMView, JavaPackage):
        lookup = view.__getattr__
        if getattr(lookup, "memoized", False):
            continue

        def memoized(self, name, _lookup=lookup):
            found = _lookup(self, name)
            if isinstance(found, (JavaClass, JavaPackage)):
                self.__dict__[name] = found  # found by attribute access from now on: __getattr__ is not called
            return found

        memoized.memoized = True
        view.__getattr__ = memoized
