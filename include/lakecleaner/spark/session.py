"""The SparkSession of an application (and of tests and the demo) on the configured catalog; its
conf is lakecleaner.core.sparkconf's, the same a spark-submit command line carries."""
from __future__ import annotations

import os

from pyspark.sql import SparkSession

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.sparkconf import spark_conf


def get_spark(cfg: LakecleanerConfig, app_name: str = "lakecleaner", set_master: bool = True) -> SparkSession:
    """A SparkSession for in-process use (tests, the demo). Under spark-submit, the master and jars
    come from the submit command line, so the job passes set_master=False."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # embedded default: stay on loopback
    builder = SparkSession.builder.appName(app_name)
    if set_master:
        builder = builder.master(cfg.spark.master)
    for key, value in spark_conf(cfg).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
