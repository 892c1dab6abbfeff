"""Spark application: make one table's deletes physical after its compaction (rewrite files that
carry deletes, expire snapshots, remove orphans). Logic in lakecleaner.maintenance (--py-files)."""
import argparse
import json
import sys

from lakecleaner.cli import RESULT_MARKER
from lakecleaner.config import load_config
from lakecleaner.maintenance import maintain_table
from lakecleaner.spark import get_spark


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="jobs/maintain.py")
    parser.add_argument("table")
    parser.add_argument("--config")
    parser.add_argument("--now-ms", type=int)
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    spark = get_spark(cfg, "lakecleaner-maintain", set_master=False)
    try:
        result, code = maintain_table(spark, cfg, args.table, now_ms=args.now_ms), 0
    except Exception as exc:  # noqa: BLE001 - report with the table's name, fail the task
        result, code = {"table": args.table, "status": "failed", "error": f"table {args.table}: {exc}"}, 1
    print(RESULT_MARKER + json.dumps(result, sort_keys=True), flush=True)
    spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
