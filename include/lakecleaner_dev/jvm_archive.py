"""A class-data-sharing archive of the classes a lakecleaner spark-submit loads (Spark SQL, Iceberg,
the MERGE path, maintenance, the quality suites' queries), for the tests' many short-lived driver
JVMs: each maps those classes from the archive instead of reading and verifying them again
(benchmarks/bench_overheads.py). Made once per machine, JDK and Spark by one warm-up application run
with -XX:ArchiveClassesAtExit (this file, under spark-submit). A JVM that cannot use the archive (another
classpath, another JDK) runs without it, and the mismatch is not logged, so a test reading a job's
output never sees it."""
from __future__ import annotations

import hashlib
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lakecleaner.core.config import CatalogConfig, LakecleanerConfig, SparkConfig
from lakecleaner_dev.run_cache import NotMade, cache_dir, entry

TABLE = "warmup.events"
# Every JVM the tests start compiles with C1 only (tests/conftest.py): the spark-submits live seconds,
# and the session's JVM, which lives the whole run, spent a third of its CPU in C2's compiler threads
# (test_engine_vs_model: 238 CPU s with C2, 192 with C1). C1 alone gets a smaller code cache (48 MB),
# which the session JVM filled, and its sweeper then burned a core: the tiered default size, 240 MB.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
# Set to 0, a test run goes without the archive (tests/conftest.py).
OPT_OUT_ENV = "LAKECLEANER_TEST_JVM_ARCHIVE"
# What a JVM that uses the archive adds to its options; -Xshare:auto (the default) runs without it
# where it does not match.
QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
USE_ARCHIVE = "-XX:SharedArchiveFile="  # what archive_options adds and archive_in reads back


def warm_up_config(workdir: str) -> LakecleanerConfig:
    return LakecleanerConfig(catalog=CatalogConfig(name="lake", type="hadoop", warehouse=f"{workdir}/warehouse"),
                             spark=SparkConfig(master="local[1]", driver_memory="512m"))


def archive_key(jars: Path | None = None) -> str:
    """The JDK (its java binary, as installed) and the jars whose classes the archive holds, each by
    name, size and modification time: what the JVM checks before it maps the archive; and the
    warm-up's source, which decides what the archive holds. A venv made
    anew at the same path (a fresh clone where an earlier one was) has the same Spark in new files,
    and a JVM given the old archive runs without it, or with -Xshare:on does not start."""
    import pyspark

    jars = jars or Path(pyspark.__file__).parent / "jars"
    java = Path(os.environ.get("JAVA_HOME", ""), "bin", "java") if os.environ.get("JAVA_HOME") else None
    java = java if java and java.exists() else Path(shutil.which("java") or "java")
    real = java.resolve()
    stamp = [f"{real}:{real.stat().st_mtime_ns if real.exists() else 0}:{pyspark.__version__}:{jars}"]
    stamp += [f"{jar.name}:{st.st_size}:{st.st_mtime_ns}" for jar in sorted(jars.glob("*.jar")) for st in [jar.stat()]]
    stamp.append(inspect.getsource(_warm_up))  # what the archive holds: a changed warm-up makes a new one
    return hashlib.sha256("\n".join(stamp).encode()).hexdigest()[:16]


def archive_options(cache: Path, base_options: str, timeout_s: float = 300) -> tuple[str, str | None]:
    """SPARK_SUBMIT_OPTS with the archive (made now if this machine has none yet: another process
    making it, as make test starts one early, is waited for); or the options as they were and why
    there is no archive."""
    try:
        archive = entry(cache, f"spark-classes-{archive_key()}.jsa", lambda part: _make(part, base_options, timeout_s))
    except NotMade as exc:
        return base_options, f"no class-data-sharing archive, spark-submits start without one: {exc}"
    except OSError as exc:
        return base_options, f"no class-data-sharing archive, spark-submits start without one: no cache directory: {exc}"
    return f"{base_options} {USE_ARCHIVE}{archive} {QUIET}".strip(), None


def archive_in(options: str) -> Path | None:
    """The archive a SPARK_SUBMIT_OPTS value (archive_options') names, if any."""
    found = re.search(re.escape(USE_ARCHIVE) + r"(\S+)", options)
    return Path(found.group(1)) if found else None


def _make(made: Path, base_options: str, timeout_s: float) -> None:
    """The archive dumped to ``made`` by the warm-up application (run_cache.entry renames it into place)."""
    from lakecleaner.core.submit import submit_options

    with tempfile.TemporaryDirectory(prefix="lakecleaner-jvm-archive-") as workdir:
        cfg = warm_up_config(workdir)
        cmd = submit_options(cfg, None).command(cfg.spark.master, "lakecleaner-jvm-archive", __file__, [workdir])
        env = {"PYSPARK_PYTHON": sys.executable, **os.environ,
               "SPARK_SUBMIT_OPTS": f"{base_options} -XX:ArchiveClassesAtExit={made}"}
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NotMade(f"the warm-up application did not run: {exc}") from exc
    if done.returncode != 0 or not made.exists():
        raise NotMade(f"the warm-up application exited {done.returncode}: {(done.stderr or done.stdout)[-500:]}")


def _warm_up(workdir: str) -> None:
    """What a test's spark-submit does, in small: an Iceberg table on the Hadoop catalog, two appends,
    a clean application's steps (the MERGE, the checkpoint, maintenance, run history, validation).
    Archiving a whole clean application rather than a compaction alone takes ~36 s instead of ~26
    (make test makes it beside ruff and the unit tests on 3.12) and maps some 1,900 more classes: a
    clean application's JVM 18.85 -> 18.31 CPU s (medians of 5, alternating)."""
    from lakecleaner.spark.batch import BatchRequest, clean_tables
    from lakecleaner.spark.session import get_spark
    from lakecleaner_dev.tables import append, create_compacted_table

    cfg = warm_up_config(workdir)
    spark = get_spark(cfg, "lakecleaner-jvm-archive", set_master=False)
    ref = create_compacted_table(spark, cfg, TABLE, {"min.compaction.lag.ms": "0"})
    for start in (0, 8):
        append(spark, ref, [{"key": f"k{i % 3}", "offset": i, "partition": i % 2, "value": None if i == 9 else f"v{i}"}
                            for i in range(start, start + 8)])
    (outcome,) = clean_tables(spark, cfg, BatchRequest((TABLE,), int(time.time() * 1000)), emit=lambda line: None)
    assert outcome.status == "ok", outcome
    spark.stop()


def ensure() -> tuple[str, str | None]:
    """The tests' SPARK_SUBMIT_OPTS (this environment's, or TEST_JVM_OPTIONS) with the archive, made now
    if missing; or without it and why (archive_options), or as they are where the run opted out.
    ``make test`` runs this first, beside ruff and the unit tests on 3.12: on a fresh machine its ~35 s
    then overlap work that leaves a core idle, and pytest_configure, which calls it again, finds the
    archive made or waits for it."""
    options = os.environ.get("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)
    if os.environ.get(OPT_OUT_ENV) == "0":
        return options, None
    return archive_options(cache_dir(), options)


if __name__ == "__main__":
    if sys.argv[1:] == ["--ensure"]:
        ensure()
    else:  # the warm-up application, under spark-submit (_make)
        _warm_up(sys.argv[1])
