"""spark-submit of the Spark applications (lakecleaner.spark.jobs), defined once: the CLI's command line and the DAG's
SparkSubmitOperator arguments are both rendered from one ``SubmitOptions``, so they cannot drift;
and the line a job prints per table for whoever submitted it (the result marker).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Iterator

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.sparkconf import is_secret, spark_conf

RESULT_MARKER = "LAKECLEANER_RESULT "  # starts a job's stdout line carrying one table's JSON result


# What executors need of the package (--py-files): the core and the Spark layer, never the Airflow face.
SHIPPED_LAYERS = ("core", "spark")


def job_path(job: str) -> str:
    """The entry file of a Spark application (``clean.py``...): a file of the installed package,
    which spark-submit runs by path."""
    return str(files("lakecleaner.spark.jobs") / job)


def spark_submit_binary() -> str:
    """pip's pyspark ships spark-submit: the one next to the Spark the package was tested with.
    Found without importing pyspark (the core never does)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("pyspark is not installed: pip install 'lakecleaner[spark]'")
    return str(Path(spec.origin).parent / "bin" / "spark-submit")


# ---------------------------------------------------------------- the result line
def format_result(result: dict) -> str:
    """A table's result as a job prints it on stdout (one line, among Spark's own output)."""
    return RESULT_MARKER + json.dumps(result, sort_keys=True, default=str)


def parse_result(line: str) -> dict | None:
    """The result a job's stdout line carries; None for any other line."""
    return json.loads(line[len(RESULT_MARKER):]) if line.startswith(RESULT_MARKER) else None


def parse_results(stdout: str) -> list[dict]:
    """Every result line of a job's stdout, in the order printed."""
    return [r for r in map(parse_result, stdout.splitlines()) if r is not None]


DEATH_TAIL_CHARS = 1_500


def death_reason(stderr: str) -> str:
    """What to show of an application that died without a result: the Python exception its driver
    raised, where there was one (the JVM's shutdown lines follow it, so a tail alone often misses it),
    then the last lines of its stderr."""
    lines = stderr.splitlines()
    tail = "\n".join(lines[-30:])[-DEATH_TAIL_CHARS:]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    at = next((i for i in range(starts[-1] + 1, len(lines)) if lines[i] and not lines[i][0].isspace()),
              None) if starts else None
    if at is None or lines[at] in tail:
        return tail
    exc = lines[at]
    if exc.startswith("py4j.protocol.Py4JJavaError") and at + 1 < len(lines) and lines[at + 1].startswith(": "):
        exc += " " + lines[at + 1][2:]  # the JVM's exception, on the line after py4j's "An error occurred..."
    return f"{exc[:500]}\n(stderr's last lines:)\n{tail}"


# ---------------------------------------------------------------- the package (--py-files)
def package_zip(dest_dir: str | os.PathLike) -> str:
    """Zip the installed lakecleaner package's core and Spark layer for --py-files, so executors run
    the same code (and nothing of the Airflow face)."""
    src = Path(__file__).resolve().parents[1]
    dest = Path(dest_dir) / "lakecleaner.zip"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        shipped = [src / "__init__.py", *(p for layer in SHIPPED_LAYERS for p in (src / layer).rglob("*.py"))]
        for path in sorted(shipped):
            zf.write(path, Path("lakecleaner") / path.relative_to(src))
    return str(dest)


@contextmanager
def built_package() -> Iterator[str]:
    """The package zip (package_zip) built afresh in a private directory (0700, a random name) of
    this process's own scratch space (tempfile: $TMPDIR), removed on exit. Whoever submits builds it
    for the submission: no file another task, machine or user may have left is trusted."""
    with tempfile.TemporaryDirectory(prefix="lakecleaner-package-") as private:
        yield package_zip(private)


# ---------------------------------------------------------------- the options, rendered twice
def _catalog_key(cfg: LakecleanerConfig, key: str) -> bool:
    prefix = f"spark.sql.catalog.{cfg.catalog.name}"
    return key == prefix or key.startswith(prefix + ".")


def submit_conf(cfg: LakecleanerConfig) -> dict[str, str]:
    """The Spark conf for a spark-submit command line: everything but the catalog's, which may hold
    credentials (tokens, JDBC passwords), and every setting Spark would redact (is_secret: S3 and
    Azure keys in spark.conf). argv is visible in ps and logged by SparkSubmitHook, and the DAG's
    mapped arguments are stored as XCom; the job sets those itself, from the config it is given,
    when it builds its session (get_spark), or the DAG's submitting task hands them over in a
    private properties file (secret_conf)."""
    return {k: v for k, v in spark_conf(cfg).items() if not _catalog_key(cfg, k) and not is_secret(k, v)}


def secret_conf(cfg: LakecleanerConfig) -> dict[str, str]:
    """The settings of ``cfg.spark.conf`` that submit_conf leaves out as secrets (the catalog's aside)."""
    return {k: v for k, v in spark_conf(cfg).items()
            if k in cfg.spark.conf and not _catalog_key(cfg, k) and is_secret(k, v)}


@dataclass(frozen=True)
class SubmitOptions:
    """What every lakecleaner spark-submit carries, whoever submits: the package zip (--py-files;
    None where the submitting task builds it itself: lakecleaner.airflow.shipping), the Iceberg
    runtime and the config's extras (--jars, --packages: see sparkconf.jars_and_packages) and the
    rest of the Spark conf (spark.driver.memory included; never the catalog's)."""

    py_files: str | None
    conf: dict[str, str] = field(default_factory=dict)
    jars: str | None = None
    packages: str | None = None

    def command(self, master: str, name: str, application: str, args: list[str]) -> list[str]:
        """The spark-submit command line (the CLI's). spark.driver.memory goes as --driver-memory."""
        conf = dict(self.conf)
        cmd = [spark_submit_binary(), "--master", master, "--name", name]
        cmd += ["--py-files", self.py_files] if self.py_files else []
        cmd += ["--jars", self.jars] if self.jars else []
        cmd += ["--packages", self.packages] if self.packages else []
        cmd += ["--driver-memory", conf.pop("spark.driver.memory")]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, application, *args]

    def operator_kwargs(self) -> dict:
        """SparkSubmitOperator arguments (the DAG's). spark.driver.memory stays in the conf:
        spark-submit's launcher reads it from --conf in client mode, and cluster managers honour it in
        cluster mode. The master is not here: it comes from the Airflow connection (spark_default),
        not from the YAML's spark.master."""
        return {**({"py_files": self.py_files} if self.py_files else {}),
                "jars": self.jars, "packages": self.packages, "conf": dict(self.conf),
                # the driver's Python must have the package's dependencies (pyspark, pyyaml): default to ours
                "env_vars": {"PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable}}


def submit_options(cfg: LakecleanerConfig, py_files: str | None) -> SubmitOptions:
    """The options of every job of this config, shipping ``py_files`` (None: no --py-files here)."""
    conf = submit_conf(cfg)
    jars, packages = conf.pop("spark.jars", None), conf.pop("spark.jars.packages", None)
    return SubmitOptions(py_files, conf, jars, packages)


def submit_command(cfg: LakecleanerConfig, config_path: str, job: str, job_args: list[str], workdir: str) -> list[str]:
    """spark-submit of jobs/``job`` on the YAML's spark.master, the package zipped into ``workdir``."""
    options = submit_options(cfg, package_zip(workdir))
    return options.command(cfg.spark.master, f"lakecleaner-{Path(job).stem}", job_path(job),
                           ["--config", config_path, *job_args])


def operator_options(cfg: LakecleanerConfig) -> dict:
    """SparkSubmitOperator arguments shared by every lakecleaner job, resolved at run time. No
    package path: the task that submits builds the package itself (lakecleaner.airflow.shipping),
    so these arguments (XCom of a mapped task) name no file of the machine that computed them."""
    return submit_options(cfg, None).operator_kwargs()
