"""Spark application: make each table's deletes physical after its compaction (rewrite files that carry deletes,
expire snapshots, remove orphans). One application for all of them; the logic lives in
lakecleaner.spark.batch (shipped with --py-files)."""
import sys

from lakecleaner.spark.startup import prefer_installed_pyspark

prefer_installed_pyspark()  # before anything imports pyspark: see lakecleaner.spark.startup
from lakecleaner.spark.batch import job_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(job_main(("maintain",)))
