"""The ``lakecleaner`` command."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .batch import RESULT_MARKER
from .config import ConfigError, load_config

REPO_ROOT = Path(__file__).resolve().parents[2]


def jobs_dir() -> Path:
    return Path(os.environ.get("LAKECLEANER_JOBS_DIR") or REPO_ROOT / "jobs")


def spark_submit_binary() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def submit_command(cfg, config_path: str, job: str, job_args: list[str], workdir: str) -> list[str]:
    """spark-submit for one of the jobs/ applications, shipping the package with --py-files."""
    from .spark import package_zip, submit_conf

    conf = submit_conf(cfg)
    cmd = [spark_submit_binary(), "--master", cfg.spark.master, "--name", f"lakecleaner-{Path(job).stem}",
           "--py-files", package_zip(workdir)]
    for key in ("spark.jars", "spark.jars.packages"):
        if key in conf:
            cmd += ["--jars" if key == "spark.jars" else "--packages", conf.pop(key)]
    cmd += ["--driver-memory", conf.pop("spark.driver.memory")]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd + [str(jobs_dir() / job), "--config", config_path, *job_args]


def run_job(cfg, config_path: str, job: str, job_args: list[str]) -> tuple[int, list[dict], str]:
    """Submit a job; return (exit code, its result lines in order, its stderr tail)."""
    with tempfile.TemporaryDirectory(prefix="lakecleaner-submit-") as workdir:
        cmd = submit_command(cfg, config_path, job, job_args, workdir)
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={"SPARK_LOCAL_IP": "127.0.0.1", **os.environ, "PYSPARK_PYTHON": sys.executable})
    results = [json.loads(line[len(RESULT_MARKER):]) for line in proc.stdout.splitlines()
               if line.startswith(RESULT_MARKER)]
    return proc.returncode, results, "\n".join(proc.stderr.splitlines()[-30:])


def run_tables_job(cfg, job: str, tables: list[str], extra: list[str]) -> tuple[int, list[dict]]:
    """Submit one application for several tables; a table the job died before reporting still gets
    a result naming it (and the exit code says failed)."""
    code, results, stderr = run_job(cfg, cfg.source, job, [*tables, *extra])
    reported = {r.get("table") for r in results}
    for table in tables:
        if table not in reported:
            results.append({"table": table, "status": "failed", "success": False,
                            "error": f"table {table}: the Spark job died without a result (exit {code}): "
                                     f"{stderr[-2000:]}"})
            code = code or 1
    return code, results


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
            mark = "ok  " if rule["success"] else ("FAIL" if rule["severity"] == "fail" else "warn")
            print(f"{mark} {result['table']}: {rule['rule']}"
                  + (f"  offending: {rule['offending']}" if not rule["success"] else ""))
    docs = next((r["docs"] for r in results if "docs" in r), None)
    if docs:
        print(f"data docs: {docs}")
    for result in results:
        print(json.dumps(result, sort_keys=True, default=str))
    return code


def cmd_evaluate(args) -> int:
    from .evaluate import format_table
    from .scheduler import evaluate_all, plan, plan_rows

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
    return 0


def cmd_clear_uncleanable(args) -> int:
    from .state import StateStore

    cfg = load_config(args.config)
    failed = 0
    for table in args.tables:
        try:
            StateStore(cfg).clear(table)
        except ValueError as exc:
            print(f"lakecleaner: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"lakecleaner: {table} is no longer marked uncleanable; the next evaluation includes it")
    return 1 if failed else 0


def cmd_demo(args) -> int:
    from .demo import main as demo_main

    return demo_main(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lakecleaner", description=__doc__)
    parser.add_argument("--config", help="YAML config (default: $LAKECLEANER_CONFIG or include/lakecleaner.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compact", help="compact tables in one Spark application; one JSON line of statistics per table")
    p.add_argument("tables", nargs="+", metavar="TABLE", help="namespace.table (in the configured catalog), in order")
    p.add_argument("--now-ms", type=int, help="the run's 'now' in epoch ms (default: the wall clock)")
    p.add_argument("--dry-run", action="store_true", help="compute the same figures, commit nothing")
    p.set_defaults(func=cmd_compact)
    p = sub.add_parser("validate", help="run the tables' data-quality suites (great-expectations on Spark)")
    p.add_argument("tables", nargs="+", metavar="TABLE")
    p.add_argument("--now-ms", type=int)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("evaluate", help="dirty and must-clean ratios of every compacted table, from metadata only")
    p.add_argument("tables", nargs="*", help="namespace.table (default: every compacted table)")
    p.add_argument("--namespace", action="append", help="only tables of this namespace (repeatable)")
    p.add_argument("--now-ms", type=int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_evaluate)
    p = sub.add_parser("clear-uncleanable", help="an operator's word that a table marked uncleanable is fixed")
    p.add_argument("tables", nargs="+")
    p.set_defaults(func=cmd_clear_uncleanable)
    p = sub.add_parser("demo", help="build the embedded demo lakehouse, compact every table, check the rules")
    p.add_argument("--seed", type=int, default=7)
    p.set_defaults(func=cmd_demo)
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
