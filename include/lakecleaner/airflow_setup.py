"""One-time Airflow setup for the lakecleaner DAG (``make airflow`` runs it after ``airflow db migrate``):

- the ``lakecleaner`` pool, sized by ``cleaner.threads`` (Kafka's log.cleaner.threads): at most that
  many Spark jobs (compact or maintain) run at once, whatever Airflow's own parallelism;
- a check that Spark can be submitted: the ``spark_default`` connection (without it
  SparkSubmitHook silently falls back to master ``yarn``) and ``spark-submit`` on PATH.

For the embedded setup (local Spark, no cluster) define the connection in the environment:

    export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[*]"}'

Usage: ``python -m lakecleaner.airflow_setup [--config lakecleaner.yaml]`` with the same
AIRFLOW_HOME / AIRFLOW__* environment as the Airflow components.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from .config import LakecleanerConfig, load_config

POOL = "lakecleaner"
SPARK_CONN_ENV = "AIRFLOW_CONN_SPARK_DEFAULT"
EMBEDDED_SPARK_CONN = '{"conn_type":"spark","host":"local[*]"}'


def pool_command(cfg: LakecleanerConfig) -> list[str]:
    return [sys.executable, "-m", "airflow", "pools", "set", POOL, str(cfg.cleaner.threads),
            f"lakecleaner Spark jobs at once (cleaner.threads={cfg.cleaner.threads})"]


def create_pool(cfg: LakecleanerConfig) -> None:
    """``airflow pools set lakecleaner <cleaner.threads> ...`` (idempotent: resizes an existing pool)."""
    proc = subprocess.run(pool_command(cfg), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"airflow pools set failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")


def problems() -> list[str]:
    """What would make the DAG's Spark jobs fail or go to the wrong place."""
    out = []
    if not os.environ.get(SPARK_CONN_ENV):
        out.append(f"{SPARK_CONN_ENV} is not set: unless a spark_default connection exists in the Airflow database, "
                   f"SparkSubmitHook falls back to master yarn. Embedded setup: export {SPARK_CONN_ENV}='{EMBEDDED_SPARK_CONN}'")
    if shutil.which("spark-submit") is None:
        out.append("spark-submit is not on PATH (pip's pyspark puts it in the venv's bin directory)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lakecleaner.airflow_setup", description=__doc__.split("\n")[0])
    parser.add_argument("--config", help="YAML config (default: $LAKECLEANER_CONFIG or include/lakecleaner.yaml)")
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    from .notify import load_notifiers

    load_notifiers(cfg.notifiers)  # a bad notifiers: entry is said now, not at the first run
    create_pool(cfg)
    print(f"lakecleaner: pool {POOL} has {cfg.cleaner.threads} slot(s) (cleaner.threads in {cfg.source})")
    for problem in problems():
        print(f"lakecleaner: warning: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
