"""Spark application: erasure on request (`lakecleaner forget`, the DAG's `forget` param). The logic
lives in lakecleaner.forget (shipped with --py-files)."""
import sys

from lakecleaner.forget import job_main

if __name__ == "__main__":
    sys.exit(job_main())
