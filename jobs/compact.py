"""Spark application: one compaction run of one table. Submitted by `lakecleaner compact` and by
the Airflow DAG (SparkSubmitOperator); the logic lives in the lakecleaner package (--py-files)."""
import argparse
import json
import sys

from lakecleaner.cli import RESULT_MARKER
from lakecleaner.config import ConfigError, load_config
from lakecleaner.engine import CompactionError, compact_table
from lakecleaner.spark import get_spark


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="jobs/compact.py")
    parser.add_argument("table")
    parser.add_argument("--config")
    parser.add_argument("--now-ms", type=int)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    spark = get_spark(cfg, "lakecleaner-compact", set_master=False)
    try:
        stats = compact_table(spark, cfg, args.table, now_ms=args.now_ms, dry_run=args.dry_run)
        code = 0
    except (CompactionError, ConfigError) as exc:
        stats, code = {"table": args.table, "status": "failed", "error": str(exc)}, 1
    print(RESULT_MARKER + json.dumps(stats, sort_keys=True), flush=True)
    spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
