"""Spark application: the data-quality suite of one table (lakecleaner.quality, via --py-files)."""
import argparse
import json
import sys

from lakecleaner.cli import RESULT_MARKER
from lakecleaner.config import load_config
from lakecleaner.quality import QualityError, validate_table
from lakecleaner.spark import get_spark


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="jobs/validate.py")
    parser.add_argument("table")
    parser.add_argument("--config")
    parser.add_argument("--now-ms", type=int)
    parser.add_argument("--run-name")
    parser.add_argument("--interval-ms", type=int, default=15 * 60_000)
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    spark = get_spark(cfg, "lakecleaner-validate", set_master=False)
    try:
        result, code = validate_table(spark, cfg, args.table, args.now_ms, args.run_name, args.interval_ms), 0
    except QualityError as exc:
        result, code = {"table": args.table, "success": False, "error": str(exc)}, 1
    except Exception as exc:  # noqa: BLE001 - report with the table's name, fail the task
        result, code = {"table": args.table, "success": False, "error": f"table {args.table}: {exc}"}, 1
    print(RESULT_MARKER + json.dumps(result, sort_keys=True, default=str), flush=True)
    spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
