"""Where the tests' session JVM spends its CPU (issue 38): a pytest plugin and a summary, run on purpose.

    PYTHONPATH=benchmarks:include .venv/bin/python -m pytest -q -p session_jvm_profile -p no:cacheprovider \\
      tests/spark/test_engine_vs_model.py -k "test_spark_job_matches_reference_model and not jdbc and not v3"
    PYTHONPATH=include .venv/bin/python benchmarks/session_jvm_profile.py       # the summary

Loaded as a plugin (before tests/conftest.py), it starts the session JVM, and every spark-submit the
tests start (they inherit SPARK_SUBMIT_OPTS and discard their recordings), with Java Flight
Recorder's ``profile`` settings and without the tests' class archive: JDK 17's JFR crashes a JVM
that maps a dynamic archive. After the last test it dumps the session JVM's recording. The summary
reads its CPU samples (Java threads only: the JIT compiler's and the collector's time are not in
them; a fork's own CPU neither, so forks are counted apart) and the processes the JVM forked, with
JDK 17's ``jfr`` tool. Its categories are checked in order, a sample counting in the first whose frame it holds.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess

RECORDING = os.environ.get("SESSION_JVM_JFR", "/tmp/session-jvm.jfr")
# Spark 3.5's ClosureCleaner parses the bytecode of each closure's capturing class (read from its jar
# and inflated) for every job; Hadoop's local file system forks `chmod` for every file it writes
# (and its .crc) where the native library is missing, as in pyspark's jars.
CATEGORIES = (
    ("ClosureCleaner (per job)", "org/apache/spark/util/ClosureCleaner"),
    ("Hadoop Shell forks (chmod per file written)", "org/apache/hadoop/util/Shell"),
    ("task (de)serialization", "org/apache/spark/serializer/JavaSerializerInstance"),
    ("broadcast", "org/apache/spark/broadcast/TorrentBroadcast"),
    ("Iceberg's Hadoop conf copy", "org/apache/iceberg/SerializableTable$SerializableConfSupplier"),
    ("Iceberg commit", "org/apache/iceberg/SnapshotProducer.commit"),
    ("Iceberg scan planning", "org/apache/iceberg/SnapshotScan.planFiles"),
    ("Catalyst analysis", "org/apache/spark/sql/catalyst/analysis/Analyzer"),
    ("Catalyst optimizer", "org/apache/spark/sql/catalyst/optimizer"),
    ("SQL parser", "org/apache/spark/sql/catalyst/parser"),
    ("Parquet", "org/apache/parquet"),
)


def _profile_the_tests_jvms() -> None:
    from lakecleaner_dev.jvm_archive import OPT_OUT_ENV, TEST_JVM_OPTIONS

    os.environ["SPARK_SUBMIT_OPTS"] = (f"{TEST_JVM_OPTIONS} -XX:FlightRecorderOptions:stackdepth=512 "
                                       "-XX:StartFlightRecording=settings=profile")
    os.environ[OPT_OUT_ENV] = "0"


def pytest_sessionfinish(session):
    """Dump the session JVM's recording: its SparkSession has stopped by now, the JVM has not."""
    from pyspark import SparkContext

    if SparkContext._jvm is None:  # no test started Spark in this process
        return
    pid = SparkContext._jvm.java.lang.ProcessHandle.current().pid()
    subprocess.run(["jcmd", str(pid), "JFR.dump", f"filename={RECORDING}"], check=True, capture_output=True)


def _events(kind: str) -> list[dict]:
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "512", "--events", kind, RECORDING],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["recording"]["events"]


def _frames(event: dict) -> list[str]:
    trace = event["values"].get("stackTrace") or {}
    return [f"{f['method']['type']['name']}.{f['method']['name']}" for f in trace.get("frames", [])]


def _thread_group(name: str) -> str:
    if name.startswith("Executor task launch"):
        return "tasks"
    return "driver (py4j)" if name.startswith("Thread-") else name


def summary() -> None:
    samples = _events("jdk.ExecutionSample")
    by_thread = collections.Counter(_thread_group(e["values"]["sampledThread"]["javaName"]) for e in samples)
    by_category = collections.Counter()
    for e in samples:
        frames = _frames(e)
        by_category[next((c for c, pat in CATEGORIES if any(pat in f for f in frames)), "other")] += 1
    n = len(samples) or 1
    print(f"{len(samples)} CPU samples of Java threads")
    print("by thread:  " + "; ".join(f"{k} {100 * v / n:.0f}%" for k, v in by_thread.most_common(6)))
    print("by category (all threads):")
    for k, v in by_category.most_common():
        print(f"  {100 * v / n:5.1f}%  {k}")
    forks = collections.Counter(" ".join(e["values"]["command"].split()[:2]) for e in _events("jdk.ProcessStart"))
    print(f"processes forked: {sum(forks.values())} ({dict(forks.most_common(4))})")


if __name__ == "__main__":
    summary()
else:
    _profile_the_tests_jvms()
