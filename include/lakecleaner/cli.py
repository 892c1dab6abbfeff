"""The ``lakecleaner`` command."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from lakecleaner.core.config import (CONFIG_ENV, DEFAULT_CONFIG_PATH, DEFAULT_INTERVAL_MS, ConfigError,
                                     config_schema, load_config)
from lakecleaner.core.submit import death_reason, parse_results, submit_command
from lakecleaner.core.quality_rules import Severity
from lakecleaner.core.rules import check_now_ms, now_in_future


def run_job(cfg, config_path: str, job: str, job_args: list[str]) -> tuple[int, list[dict], str]:
    """Submit a job; return (exit code, its result lines in order, why it died if it did: death_reason)."""
    with tempfile.TemporaryDirectory(prefix="lakecleaner-submit-") as workdir:
        cmd = submit_command(cfg, config_path, job, job_args, workdir)
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={"SPARK_LOCAL_IP": "127.0.0.1", **os.environ, "PYSPARK_PYTHON": sys.executable})
    return proc.returncode, parse_results(proc.stdout), death_reason(proc.stderr)


def run_tables_job(cfg, job: str, tables: list[str], extra: list[str]) -> tuple[int, list[dict]]:
    """Submit one application for several tables; a table the job died before reporting still gets
    a result naming it (and the exit code says failed)."""
    code, results, died = run_job(cfg, cfg.source, job, [*tables, *extra])
    reported = {r.get("table") for r in results}
    for table in tables:
        if table not in reported:
            results.append({"table": table, "status": "failed", "success": False,
                            "error": f"table {table}: the Spark job died without a result (exit {code}): "
                                     f"{died}"})
            code = code or 1
    return code, results


def now_ms_arg(value: str) -> int:
    """``--now-ms``: the run's now in epoch ms, refused when ahead of this machine's clock
    (rules.now_in_future), before any Spark starts."""
    try:
        now = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time in epoch milliseconds: {value!r}") from None
    try:
        check_now_ms(now)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    clock = int(time.time() * 1000)
    if now_in_future(now, clock):
        raise argparse.ArgumentTypeError(
            f"{now} ({_utc(now)}) is ahead of this machine's clock ({_utc(clock)}): a run as of the future would "
            "expire tombstones before delete.retention.ms has passed and keep later runs off the table until then")
    return now


def _utc(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return "beyond the calendar"


def _common_args(args) -> list[str]:
    return ["--now-ms", str(args.now_ms)] if args.now_ms is not None else []


def cmd_compact(args) -> int:
    cfg = load_config(args.config)
    code, results = run_tables_job(cfg, "compact.py", args.tables, _common_args(args)
                                   + (["--dry-run"] if args.dry_run else []))
    for result in results:
        print(json.dumps(result, sort_keys=True))
    return code


def cmd_validate(args) -> int:
    cfg = load_config(args.config)
    code, results = run_tables_job(cfg, "validate.py", args.tables, _common_args(args))
    for result in results:
        for rule in result.get("rules", []):
            mark = "ok  " if rule["success"] else ("FAIL" if rule["severity"] == Severity.FAIL else "warn")
            print(f"{mark} {result['table']}: {rule['rule']}"
                  + (f"  offending: {rule['offending']}" if not rule["success"] else ""))
    docs = next((r["docs"] for r in results if "docs" in r), None)
    if docs:
        print(f"data docs: {docs}")
    for result in results:
        print(json.dumps(result, sort_keys=True, default=str))
    return code


def cmd_evaluate(args) -> int:
    from lakecleaner.core.evaluate import format_table
    from lakecleaner.core.records import NOTEWORTHY
    from lakecleaner.core.scheduler import evaluate_all, plan, plan_rows

    cfg = load_config(args.config)
    evaluations = evaluate_all(cfg, args.tables or None, args.now_ms, args.namespace or ())
    if args.json:
        print(json.dumps(plan_rows(evaluations), sort_keys=True))
    else:
        print(format_table(evaluations))
        jobs = plan(evaluations)
        uncleanable = sum(e.status == "uncleanable" for e in evaluations)
        print(f"\n{len(jobs)} of {len(evaluations)} tables to clean"
              + (f" in this order: {', '.join(j.table for j in jobs)}" if jobs else "")
              + f"; uncleanable tables: {uncleanable}")
    noteworthy = [e for e in evaluations if e.status in NOTEWORTHY]
    for e in noteworthy:  # on stderr too: a script reading --json sees the exit code and why
        reason = e.reason if (e.reason or "").startswith(f"table {e.table}") else f"table {e.table}: {e.reason}"
        print(f"lakecleaner: {e.status}: {reason}", file=sys.stderr)
    return 1 if noteworthy else 0


def cmd_clear_uncleanable(args) -> int:
    from lakecleaner.core.scheduler import clear_marks

    cleared = clear_marks(load_config(args.config), args.tables)
    for c in cleared:
        print(f"lakecleaner: {c.message}", file=sys.stdout if c.ok else sys.stderr)
    return 0 if all(c.ok for c in cleared) else 1


class RefusedKey(argparse.Action):
    """``--key K``, the syntax before the request table: refused without echoing K (argparse's own
    error for an unknown option would print it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(2, "lakecleaner forget: --key is gone: keys never go on a command line, where every process "
                       "list and shell history shows them; write them as JSON lines to a file or stdin: --keys FILE|-\n")


def cmd_forget(args) -> int:
    """Erasure on request (lakecleaner.spark.forget): the keys go from a file or stdin (never argv) into the
    request table, through a private file the application reads; then it carries the request out
    (unless --enqueue-only). One JSON line: ids, counts and hashes, never a key."""
    import getpass

    from lakecleaner.core.erasure_requests import key_rows

    cfg = load_config(args.config)
    try:
        with (open(args.keys) if args.keys != "-" else sys.stdin) as f:
            lines = [line.strip() for line in f]
        key_rows(lines, "stdin" if args.keys == "-" else args.keys)  # refused here, before any Spark
    except (OSError, ValueError) as exc:
        print(f"lakecleaner: forget {args.table}: {exc}", file=sys.stderr)
        return 2
    # --opt=value: a reason or a user name starting with '-' is a value, not an option
    extra = _common_args(args) + ["--interval-ms", str(args.interval_ms), f"--table={args.table}",
                                  f"--requested-by={args.requested_by or getpass.getuser()}"]
    extra += ([f"--reason={args.reason}"] if args.reason else []) + (["--dry-run"] if args.dry_run else [])
    extra += ["--enqueue-only"] if args.enqueue_only else []
    with tempfile.TemporaryDirectory(prefix="lakecleaner-forget-") as private:  # 0700
        path = Path(private) / "keys.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines(line + "\n" for line in lines if line)  # as given: checked above, parsed again there
        code, results, died = run_job(cfg, cfg.source, "forget.py", ["--enqueue-file", str(path), *extra])
    if not results:
        results = [{"table": args.table, "status": "failed",
                    "error": f"table {args.table}: the Spark job died without a result (exit {code}): {died}"}]
        code = code or 1
    for result in results:
        print(json.dumps(result, sort_keys=True))
    return code


def cmd_view(args) -> int:
    """The latest-per-key view (lakecleaner.core.view): its SQL on stdout, from metadata (no Spark);
    with --register, also registered in the catalog."""
    from lakecleaner.core.view import ViewError, latest_view

    cfg = load_config(args.config)
    try:
        view = latest_view(cfg, args.table, args.name)
        print(view.sql, flush=True)
        if args.register:
            from lakecleaner.spark.view import register_with_own_session

            register_with_own_session(cfg, view)
            print(f"lakecleaner: registered view {view.view.sql()}", file=sys.stderr)
    except ViewError as exc:
        print(f"lakecleaner: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_config_check(args) -> int:
    """The config file checked as every command loads it: exit 0, or 2 with every problem on stderr
    (values under catalog, spark.conf and notifiers never shown)."""
    path = args.file or os.environ.get(CONFIG_ENV) or str(DEFAULT_CONFIG_PATH)
    try:
        load_config(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"lakecleaner: {problem}", file=sys.stderr)
        return 2
    print(f"lakecleaner: {path}: a valid lakecleaner config")
    return 0


def cmd_code_bundle(args) -> int:
    """What a DAG's code_uri must hold for cluster deploy mode, written to DIR (lakecleaner.core.cluster)."""
    from lakecleaner.core.cluster import code_bundle

    for path in code_bundle(args.dir):
        print(path)
    return 0


def cmd_config_schema(args) -> int:
    print(json.dumps(config_schema(), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lakecleaner", description=__doc__)
    parser.add_argument("--config", help="YAML config (default: $LAKECLEANER_CONFIG, else the shipped default: ./warehouse)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compact", help="compact tables in one Spark application; one JSON line of statistics per table")
    p.add_argument("tables", nargs="+", metavar="TABLE", help="namespace.table (in the configured catalog), in order")
    p.add_argument("--now-ms", type=now_ms_arg,
                   help="the run's 'now' in epoch ms, a backfill's (default: the wall clock; never ahead of it)")
    p.add_argument("--dry-run", action="store_true", help="compute the same figures, commit nothing")
    p.set_defaults(func=cmd_compact)
    p = sub.add_parser("validate", help="run the tables' data-quality suites (great-expectations on Spark)")
    p.add_argument("tables", nargs="+", metavar="TABLE")
    p.add_argument("--now-ms", type=now_ms_arg)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("evaluate", help="dirty and must-clean ratios of every compacted table, from metadata "
                                        "only; exit 1 if a table is invalid, unreadable or uncleanable")
    p.add_argument("tables", nargs="*", help="namespace.table (default: every compacted table)")
    p.add_argument("--namespace", action="append", help="only tables of this namespace (repeatable)")
    p.add_argument("--now-ms", type=int, help="evaluate as of this now (a future one too: what a coming run plans)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_evaluate)
    p = sub.add_parser("clear-uncleanable", help="an operator's word that a table marked uncleanable is fixed")
    p.add_argument("tables", nargs="+")
    p.set_defaults(func=cmd_clear_uncleanable)
    p = sub.add_parser("forget", help="erase keys on request: their records leave the table and its quarantine, "
                                      "made physical, audited by the key's keyed hash")
    p.add_argument("table", metavar="TABLE")
    p.add_argument("--keys", required=True, metavar="FILE",
                   help='the keys as JSON lines, one object per key naming every key column ({"tenant": 7, '
                        '"id": 42}); - reads stdin. Never on the command line, where every process list shows it')
    p.add_argument("--key", action=RefusedKey, help=argparse.SUPPRESS)  # the old syntax: never echoed
    p.add_argument("--reason", help="why (kept in the audit)")
    p.add_argument("--requested-by", help="who asked (kept in the audit; default: this user)")
    p.add_argument("--enqueue-only", action="store_true",
                   help="only write the request to the request table; the DAG's next run carries it out")
    p.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    p.add_argument("--now-ms", type=now_ms_arg)
    p.add_argument("--interval-ms", type=int, default=DEFAULT_INTERVAL_MS,
                   help="the DAG's schedule interval, for the deadline (default 15 min)")
    p.set_defaults(func=cmd_forget)
    p = sub.add_parser("view", help="print the SQL of a table's latest-per-key view (one record per key, tombstones "
                                    "hidden); --register creates it in the catalog")
    p.add_argument("table", metavar="TABLE", help="namespace.table (in the configured catalog)")
    p.add_argument("--name", help="the view's name, view or namespace.view (default: <table>__latest beside the table)")
    p.add_argument("--register", action="store_true", help="create or replace the view (catalogs with views)")
    p.set_defaults(func=cmd_view)
    p = sub.add_parser("config", help="the config file: check it, or print its JSON Schema")
    config = p.add_subparsers(dest="config_command", required=True)
    p = config.add_parser("check", help="load FILE as every command does: exit 0, or 2 with every problem (for CI)")
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="the config (default: --config, else $LAKECLEANER_CONFIG, else the shipped default)")
    p.set_defaults(func=cmd_config_check)
    p = config.add_parser("schema", help="print the config file's JSON Schema (for editors)")
    p.set_defaults(func=cmd_config_schema)
    p = sub.add_parser("code-bundle", help="write what a DAG's code_uri holds for cluster deploy mode (the package "
                                           "zip and the job files) to DIR, to copy there or into the driver's image")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=cmd_code_bundle)
    args = parser.parse_args(argv)
    if args.config:
        os.environ["LAKECLEANER_CONFIG"] = str(Path(args.config).resolve())
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"lakecleaner: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
