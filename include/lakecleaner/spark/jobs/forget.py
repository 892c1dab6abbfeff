"""Spark application: erasure on request (`lakecleaner forget`, the DAG's `forget` task): the pending
requests of the request table. The logic lives in lakecleaner.spark.erasure_requests and lakecleaner.spark.forget
(shipped with --py-files)."""
import sys

from lakecleaner.spark.startup import prefer_installed_pyspark

prefer_installed_pyspark()  # before anything imports pyspark: see lakecleaner.spark.startup
from lakecleaner.spark.erasure_requests import job_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(job_main())
