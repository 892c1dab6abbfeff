"""Each application entry (jobs/*.py), started with the path spark-submit gives a driver (the package
zip, then Spark's pyspark.zip and py4j zip), imports the installed, byte-compiled pyspark, not the
zip's source (lakecleaner.spark.startup). No JVM: the entry's own imports and ``--help``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakecleaner.core.submit import job_path, package_zip

pytestmark = pytest.mark.spark

PROBE = """
import runpy, sys
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
import pyspark, lakecleaner
print(pyspark.__file__)
print(lakecleaner.__file__)
"""


def test_every_entry_imports_the_installed_pyspark_before_the_zip(tmp_path):
    import importlib.util

    installed = Path(importlib.util.find_spec("pyspark").origin).parent
    spark_lib = installed / "python" / "lib"
    shipped = package_zip(tmp_path)
    driver_path = os.pathsep.join([shipped, str(spark_lib / "pyspark.zip"), *map(str, spark_lib.glob("py4j-*.zip"))])
    for job in ("clean.py", "compact.py", "maintain.py", "validate.py", "forget.py"):
        out = subprocess.run([sys.executable, "-c", PROBE, job_path(job)], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": driver_path}, cwd=tmp_path, timeout=120)
        pyspark_file, package_file = out.stdout.splitlines()[-2:]
        assert package_file.startswith(shipped), (job, package_file)  # the entry ran as a driver would
        assert Path(pyspark_file).parent == installed, (job, pyspark_file, out.stderr[-2000:])
