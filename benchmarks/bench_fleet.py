"""The fleet series: many small tables taken through the whole chain (compact -> maintain ->
validate), once the way the DAG ran it before packing (one Spark application per table per job:
three spark-submits per table) and once packed (one spark-submit of jobs/clean.py for all of
them), in the same run, on the same kind of tables.

Each table is built in the state a compacted table is in between runs: a clean part (the first
1 - dirty of a producer-like stream, the four strategies in turn) compacted once, so it has a
checkpoint, then the rest of the stream (updates of the same keys) appended after it in a few
snapshots, so the chain has real work. The packed run gets --tables of them, the old path
--old-tables separate ones built the same way, so both see fresh dirty tables.

Reported, each next to its target (2 cores):
- packed seconds per table overall (application wall time / N) and the marginal cost of one more
  table: the slope of the completion times between the 10th and the Nth table (target <= 3 s);
- old path seconds per table (the three applications, end to end; median and mean);
- old / packed-marginal (target >= 15x) and old / packed-overall;
- peak RSS of the packed application's process tree (spark-submit's JVM, the Python driver, any
  Python workers), and its RSS at the 10th and at the Nth table's completion (target: flat, within
  ~10-15%), JVM and Python apart, with the driver's live heap after a full GC at both points (jcmd)
  to tell retained memory from a heap the collector merely let grow;
- the packed application's CPU use, and the CPU other processes used during each path (the
  machine may be shared: a warning says when the figures are pessimistic).
The tables are numbered by completion (two are in flight at a time by default); the
per-table completion times and RSS, and an RSS timeline, go to benchmarks/results/fleet-<epoch>.json.

Usage: python benchmarks/bench_fleet.py [--tables 40] [--records 20000] [--dirty 0.2] [--old-tables 4]
       [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

from lakecleaner.spark.batch import SECTION
from lakecleaner.core.config import load_config
from lakecleaner_dev.demo import DEMO_TABLES
from lakecleaner.spark.engine import compact_table
from lakecleaner_dev.generator import cdc_rows, produce
from lakecleaner.core.submit import parse_result, parse_results, submit_command
from lakecleaner_dev.tables import append, create_compacted_table

RESULTS = Path(__file__).resolve().parent / "results"
STRATEGIES = list(DEMO_TABLES.values())  # (properties, schema, kind): offset, timestamp, header, column (CDC)
KINDS = [name.rsplit("_", 1)[1] for name in DEMO_TABLES]  # offset, timestamp, header, cdc: in table names
DIRTY_APPENDS = 4  # the dirty part lands in this many snapshots, as several landing-job batches
MARK = 10  # the marginal cost and the memory are measured from the completion of this table on
MB = 2**20
STEP_LINE = re.compile(r"^  (compact|maintain|validate): \S+ in ([0-9.]+) s")


class TreeRss:
    """Resident memory of a process and all its descendants (spark-submit's JVM, the Python driver
    it starts, Python workers), sampled every 0.1 s: ``peak`` (and when) over the run, ``split()``
    on demand (JVM and Python processes apart), and a timeline of one sample a second."""

    def __init__(self, pid: int):
        self.proc, self.peak, self.peak_at, self._stop = psutil.Process(pid), 0, 0.0, threading.Event()
        self.timeline: list[tuple[float, float]] = []  # (s since start, MB)
        self.cpu: dict[tuple[int, float], float] = {}  # (pid, started) -> CPU seconds, last seen

    def split(self) -> tuple[int, int]:
        """(JVM bytes, Python and other bytes) of the tree now. A child caught between fork and exec
        still maps its parent's memory and shows the parent's RSS (the JVM starts its helpers so, by
        posix_spawn): it is not counted twice. Local mode runs one JVM, so a JVM's child JVM is one."""
        jvm = other = 0
        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
        except psutil.Error:
            return 0, 0
        seen: dict[int, tuple[str, int]] = {}
        for p in procs:
            try:
                with p.oneshot():
                    rss, name, ppid = p.memory_info().rss, p.name(), p.ppid()
                    t = p.cpu_times()
                self.cpu[(p.pid, p.create_time())] = t.user + t.system
            except psutil.Error:  # a worker that just exited
                continue
            seen[p.pid] = (name, rss)
            parent = seen.get(ppid)
            if parent is not None and parent[0] == name and (name == "java" or parent[1] == rss):
                continue  # the parent's own memory, seen through a child not yet exec'd
            if name == "java":
                jvm += rss
            else:
                other += rss
        return jvm, other

    def now(self) -> int:
        return sum(self.split())

    @property
    def cpu_s(self) -> float:
        """CPU seconds of the tree's processes, as last sampled (a process is sampled every 0.1 s)."""
        return sum(self.cpu.values())

    def jvm_pid(self) -> int | None:
        try:
            return next((p.pid for p in [self.proc, *self.proc.children(recursive=True)] if p.name() == "java"), None)
        except psutil.Error:
            return None

    def __enter__(self):
        self.started = time.time()
        self.peak = self.now()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        last = -1.0
        while not self._stop.wait(0.1):
            rss, at = self.now(), time.time() - self.started
            if rss > self.peak:
                self.peak, self.peak_at = rss, at
            if at - last >= 1.0:
                self.timeline.append((round(at, 1), round(rss / MB, 1)))
                last = at

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


HEAP_LINE = re.compile(r"^\s*(PSYoungGen|ParOldGen|Metaspace)\s+(?:total \d+K, )?used (\d+)K", re.M)


def live_heap_mb(pid: int | None) -> dict | None:
    """The JVM's heap after a full collection (jcmd GC.run, then GC.heap_info): what the driver
    really holds, as opposed to its RSS, which grows with the heap the collector chose to keep."""
    jcmd = shutil.which("jcmd") or (str(Path(os.environ["JAVA_HOME"]) / "bin" / "jcmd") if "JAVA_HOME" in os.environ else None)
    if pid is None or jcmd is None:
        return None
    try:
        subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, text=True, timeout=60, check=True)
        info = subprocess.run([jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = {name: int(kb) / 1024 for name, kb in HEAP_LINE.findall(info)}
    if "ParOldGen" not in used:  # another collector than -XX:+UseParallelGC: no figure
        return None
    return {"heap_mb": round(used.get("PSYoungGen", 0) + used["ParOldGen"], 1),
            "metaspace_mb": round(used.get("Metaspace", 0), 1)}


class ForeignLoad:
    """CPU used by processes outside this benchmark's own tree while it measures (the machine may be
    shared): their CPU seconds over the wall time, in cores, sampled every second. A figure well
    above zero means the measurement competed for the 2 cores and is pessimistic."""

    def __init__(self):
        self.me, self.cpu_s, self._stop, self._last = psutil.Process(), 0.0, threading.Event(), {}

    def _sample(self, first: bool = False) -> None:
        try:
            mine = {self.me.pid, *(p.pid for p in self.me.children(recursive=True))}
        except psutil.Error:
            mine = {self.me.pid}
        for p in psutil.process_iter(["pid", "cpu_times", "create_time"]):
            if p.info["pid"] in mine or p.info["cpu_times"] is None:
                continue
            t = p.info["cpu_times"].user + p.info["cpu_times"].system
            key = (p.info["pid"], p.info["create_time"])
            if key in self._last:
                self.cpu_s += max(0.0, t - self._last[key])
            elif not first and (p.info["create_time"] or 0) >= self.started:
                self.cpu_s += t  # started since the last sample
            self._last[key] = t

    def __enter__(self):
        self.started = time.time()
        self._sample(first=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(1.0):
            self._sample()

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        self.cores = round(self.cpu_s / max(1e-9, time.time() - self.started), 2)


def write_config(path: Path, warehouse: Path, threads: int | None) -> None:
    raw = {"catalog": {"name": "lake", "type": "hadoop", "warehouse": str(warehouse)},
           "spark": {"master": "local[2]", "driver_memory": "2g"}}
    if threads is not None:
        raw["cleaner"] = {"application_threads": threads}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def build_table(spark, cfg, table: str, strategy: int, records: int, dirty: float, seed: int) -> None:
    """One table: the clean part appended and compacted (a checkpoint), then the dirty part
    (updates of the same keys, offsets past the checkpoint) appended in DIRTY_APPENDS snapshots."""
    props, schema, kind = STRATEGIES[strategy % len(STRATEGIES)]
    n_clean = int(records * (1 - dirty))
    rows = [r for b in produce(records, max(1, n_clean), partitions=2, seed=seed, batch_size=records) for r in b]
    rows = cdc_rows([rows])[0] if kind == "cdc" else [{k: v for k, v in r.items() if k != "ver"} for r in rows]
    ref = create_compacted_table(spark, cfg, table, props, schema=schema)
    append(spark, ref, rows[:n_clean], schema)
    compact_table(spark, cfg, table)
    rest = rows[n_clean:]
    step = -(-len(rest) // DIRTY_APPENDS) if rest else 1
    for i in range(0, len(rest), step):
        append(spark, ref, rest[i:i + step], schema)


def build(cfg, names: list[tuple[str, int]], records: int, dirty: float) -> float:
    """All tables, in one in-process Spark application that is then stopped and its JVM ended, so
    the measurements have the machine to themselves."""
    from pyspark import SparkContext

    from lakecleaner.spark.session import get_spark

    t0 = time.time()
    spark = get_spark(cfg, "lakecleaner-bench-fleet-build")
    try:
        for i, (table, strategy) in enumerate(names):
            build_table(spark, cfg, table, strategy, records, dirty, seed=1000 + i)
            print(f"  built {table} ({i + 1}/{len(names)}, {time.time() - t0:.0f} s)", flush=True)
    finally:
        spark.stop()
        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if gateway is not None:
            try:
                gateway.shutdown()
            except Exception:  # noqa: BLE001 - the JVM is ended below anyway
                pass
        if proc is not None:  # the JVM we launched: end it (and its children) by pid
            try:
                tree = psutil.Process(proc.pid)
                for p in [*tree.children(recursive=True), tree]:
                    p.terminate()
                psutil.wait_procs([tree], timeout=20)
            except psutil.Error:
                pass
        SparkContext._gateway = SparkContext._jvm = None
    return time.time() - t0


def spark_env() -> dict:
    return {"SPARK_LOCAL_IP": "127.0.0.1", **os.environ, "PYSPARK_PYTHON": sys.executable}


def run_old_path(cfg, config_path: str, tables: list[str], now_ms: int, run_name: str, workdir: str) -> list[dict]:
    """The DAG before packing: per table compact.py, maintain.py, validate.py, one application each."""
    rows = []
    for table in tables:
        steps = {}
        for job, extra in (("compact.py", []), ("maintain.py", []),
                           ("validate.py", ["--run-name", run_name, "--interval-ms", str(15 * 60_000)])):
            cmd = submit_command(cfg, config_path, job, [table, "--now-ms", str(now_ms), *extra], workdir)
            t0 = time.time()
            with tempfile.TemporaryFile("w+") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=spark_env())
                with TreeRss(proc.pid) as mem:
                    out, _ = proc.communicate()
                elapsed = time.time() - t0
                err.seek(0)
                stderr = err.read()
            results = parse_results(out)
            status = results[0].get("status") if results else None
            if proc.returncode != 0 or status not in ("committed", "passed", None) or not results \
                    or results[0].get("error"):
                print(out[-4000:], "\n", "\n".join(stderr.splitlines()[-40:]), file=sys.stderr)
                raise SystemExit(f"old path: {job} {table} exited {proc.returncode} with {results}")
            steps[job.removesuffix(".py")] = {"s": round(elapsed, 2), "peak_rss_mb": mem.peak // MB}
        total = sum(s["s"] for s in steps.values())
        rows.append({"table": table, "seconds": round(total, 2), "steps": steps})
        print(f"  old path {table}: {total:.1f} s ("
              + ", ".join(f"{k} {v['s']:.1f} s" for k, v in steps.items()) + ")", flush=True)
    return rows


def run_packed(cfg, config_path: str, tables: list[str], now_ms: int, run_name: str, workdir: str,
               mark: int) -> dict:
    """One application for all tables (as the DAG now submits it), timed table by table from its
    task log: the wall time at which each table's section ends, and the process tree's RSS then.
    At the ``mark``th and the last completion the driver's live heap is probed too (a full GC:
    well under a second, so it barely moves the slope between them)."""
    args = [*tables, "--now-ms", str(now_ms), "--run-name", run_name, "--interval-ms", str(15 * 60_000),
            "--budget-s", "86400", "--record-outcomes", "--report", f"bench/fleet-{now_ms}.json"]
    cmd = submit_command(cfg, config_path, "clean.py", args, workdir)
    end_prefix = f"{SECTION} lakecleaner: "
    completions, results, log = [], [], []
    step_s = {"compact": 0.0, "maintain": 0.0, "validate": 0.0}
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1, env=spark_env())
        with TreeRss(proc.pid) as mem:
            for line in proc.stdout:
                now = time.time() - t0
                line = line.rstrip("\n")
                log.append(line)
                if (result := parse_result(line)) is not None:
                    results.append(result)
                elif m := STEP_LINE.match(line):  # a step of a table's block: "  compact: committed in 1.2 s {...}"
                    step_s[m.group(1)] += float(m.group(2))
                elif line.startswith(end_prefix) and line.endswith(SECTION) and ": " in line[len(end_prefix):]:
                    # "============ lakecleaner: T: OK (x s) ============" ends a table's block
                    table, _, rest = line[len(end_prefix):].partition(": ")
                    jvm, other = mem.split()
                    completions.append({"table": table, "at_s": round(now, 3), "status": rest.split(" ")[0],
                                        "rss_mb": round((jvm + other) / MB, 1), "jvm_rss_mb": round(jvm / MB, 1),
                                        "python_rss_mb": round(other / MB, 1)})
                    if len(completions) in (mark, len(tables)):
                        completions[-1]["live"] = live_heap_mb(mem.jvm_pid())
                    if len(completions) % 5 == 0 or len(completions) == len(tables):
                        print(f"  packed: {len(completions)}/{len(tables)} tables done at {now:.1f} s, "
                              f"RSS {completions[-1]['rss_mb']:.0f} MB", flush=True)
            code = proc.wait()
        wall = time.time() - t0
        err.seek(0)
        stderr = err.read()
    bad = [r for r in results if r.get("status") != "ok"]
    if code != 0 or bad or len(results) != len(tables) or len(completions) != len(tables):
        print("\n".join(log[-200:]), "\n--- stderr tail ---\n", "\n".join(stderr.splitlines()[-60:]), file=sys.stderr)
        for r in bad:
            print(f"FAILED {r.get('table')}: status={r.get('status')} step={r.get('failed_step')}: {r.get('error')}",
                  file=sys.stderr)
        raise SystemExit(f"packed run: exit {code}, {len(results)} results and {len(completions)} completed "
                         f"sections for {len(tables)} tables, {len(bad)} not ok")
    return {"wall_s": round(wall, 2), "completions": completions, "peak_rss_mb": round(mem.peak / MB, 1),
            "peak_rss_at_s": round(mem.peak_at, 1), "rss_timeline_mb": mem.timeline, "cpu_s": round(mem.cpu_s, 1),
            "durations_s": {r["table"]: r["duration_ms"] / 1000 for r in results},
            "step_s_total": {k: round(v, 1) for k, v in step_s.items()}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=40, help="tables in the packed application")
    parser.add_argument("--records", type=int, default=20000, help="records per table")
    parser.add_argument("--dirty", type=float, default=0.2, help="share of each table appended after its checkpoint")
    parser.add_argument("--old-tables", type=int, default=4, help="tables taken through the old path")
    parser.add_argument("--threads", type=int, help="override cleaner.application_threads (default: the built-in)")
    parser.add_argument("--warehouse", default=str(RESULTS / "fleet_warehouse"))
    args = parser.parse_args()
    if args.tables < 2:
        parser.error("--tables must be at least 2: the marginal cost is a slope between two completions")
    mark = MARK if args.tables > MARK else args.tables // 2  # a small trial run measures from its middle
    wh = Path(args.warehouse).resolve()
    shutil.rmtree(wh, ignore_errors=True)
    wh.mkdir(parents=True)
    config_path = str(wh / "fleet.yaml")
    write_config(Path(config_path), wh, args.threads)
    cfg = load_config(config_path)
    packed_tables = [f"fleet.t{i:03d}_{KINDS[i % 4]}" for i in range(args.tables)]
    old_tables = [f"fleet_old.t{i:03d}_{KINDS[i % 4]}" for i in range(args.old_tables)]
    print(f"building {len(packed_tables)} + {len(old_tables)} tables of {args.records:,} records "
          f"({args.dirty:.0%} dirty) in {wh} ...", flush=True)
    build_s = build(cfg, [(t, i % 4) for i, t in enumerate(old_tables)] + [(t, i % 4) for i, t in enumerate(packed_tables)],
                    args.records, args.dirty)
    print(f"built in {build_s:.0f} s", flush=True)

    now_ms = int(time.time() * 1000) + 1000
    run_name = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ms / 1000))
    time.sleep(1.0)
    with tempfile.TemporaryDirectory(prefix="lakecleaner-bench-fleet-") as workdir:
        print(f"old path: 3 applications per table over {len(old_tables)} table(s) ...", flush=True)
        with ForeignLoad() as old_foreign:
            old = run_old_path(cfg, config_path, old_tables, now_ms, run_name, workdir)
        print(f"packed: one application over {len(packed_tables)} tables "
              f"(application_threads={cfg.cleaner.application_threads}) ...", flush=True)
        with ForeignLoad() as packed_foreign:
            packed = run_packed(cfg, config_path, packed_tables, now_ms, run_name, workdir, mark)

    n = args.tables
    old_s = [r["seconds"] for r in old]
    old_median, old_mean = statistics.median(old_s), statistics.mean(old_s)
    comp = packed["completions"]
    at_mark, at_end = comp[mark - 1], comp[-1]
    marginal = (at_end["at_s"] - at_mark["at_s"]) / (n - mark)
    overall = packed["wall_s"] / n
    durations = list(packed["durations_s"].values())
    first = comp[0]
    startup = first["at_s"] - packed["durations_s"][first["table"]]
    rss_ratio = at_end["rss_mb"] / at_mark["rss_mb"] if at_mark["rss_mb"] else float("nan")
    live_mark, live_end = at_mark.get("live"), at_end.get("live")
    heap_ratio = live_end["heap_mb"] / live_mark["heap_mb"] if live_mark and live_end and live_mark["heap_mb"] else None
    summary = {
        "tables": n, "records": args.records, "dirty": args.dirty, "old_tables": args.old_tables,
        "application_threads": cfg.cleaner.application_threads, "cores": psutil.cpu_count(), "build_s": round(build_s, 1),
        "old_s_per_table_median": round(old_median, 2), "old_s_per_table_mean": round(old_mean, 2),
        "old_step_s_median": {step: round(statistics.median(r["steps"][step]["s"] for r in old), 2)
                              for step in ("compact", "maintain", "validate")},
        "old_peak_rss_mb": max(s["peak_rss_mb"] for r in old for s in r["steps"].values()),
        "packed_wall_s": packed["wall_s"], "packed_s_per_table_overall": round(overall, 2),
        "packed_marginal_s_per_table": round(marginal, 2),
        "packed_table_duration_median_s": round(statistics.median(durations), 2),
        "packed_startup_s": round(startup, 1),
        "packed_tail_after_last_table_s": round(packed["wall_s"] - at_end["at_s"], 1),
        "packed_step_s_total": packed["step_s_total"],
        "ratio_old_over_packed_marginal": round(old_median / marginal, 1) if marginal > 0 else None,
        "ratio_old_over_packed_overall": round(old_median / overall, 1),
        "foreign_cpu_cores_old_path": old_foreign.cores, "foreign_cpu_cores_packed": packed_foreign.cores,
        "mark_table": mark, "packed_peak_rss_mb": packed["peak_rss_mb"], "packed_rss_at_mark_mb": at_mark["rss_mb"],
        "packed_rss_at_last_mb": at_end["rss_mb"], "packed_rss_last_over_mark": round(rss_ratio, 3),
        "packed_jvm_rss_at_mark_mb": at_mark["jvm_rss_mb"], "packed_jvm_rss_at_last_mb": at_end["jvm_rss_mb"],
        "packed_python_rss_at_mark_mb": at_mark["python_rss_mb"],
        "packed_python_rss_at_last_mb": at_end["python_rss_mb"], "packed_peak_rss_at_s": packed["peak_rss_at_s"],
        "packed_live_heap_at_mark": at_mark.get("live"), "packed_live_heap_at_last": at_end.get("live"),
        "packed_cpu_s": packed["cpu_s"],
        "packed_cpu_utilisation": round(packed["cpu_s"] / packed["wall_s"] / psutil.cpu_count(), 2),
    }
    targets = {"marginal_le_3s": marginal <= 3.0,
               "ratio_ge_15x": summary["ratio_old_over_packed_marginal"] is not None
               and summary["ratio_old_over_packed_marginal"] >= 15,
               # What the driver holds is its live heap after a full GC; RSS also grows while the JVM
               # expands its heap lazily towards driver_memory (-Xmx), which bounds it. RSS decides only
               # where the live heap could not be measured.
               "memory_flat": heap_ratio <= 1.15 if heap_ratio is not None else abs(rss_ratio - 1) <= 0.15}

    print(f"\nfleet series: {n} tables of {args.records:,} records, {args.dirty:.0%} dirty, four strategies in turn, "
          f"{summary['cores']} cores, application_threads={summary['application_threads']} (build {build_s:.0f} s)")
    print(f"old path (3 applications per table, {len(old)} tables): {old_median:.1f} s per table median, "
          f"{old_mean:.1f} s mean (compact {summary['old_step_s_median']['compact']:.1f} + maintain "
          f"{summary['old_step_s_median']['maintain']:.1f} + validate {summary['old_step_s_median']['validate']:.1f} s); "
          f"peak RSS of one application {summary['old_peak_rss_mb']} MB; other processes used "
          f"{old_foreign.cores:.2f} cores meanwhile")
    print(f"packed (1 application): {packed['wall_s']:.1f} s for {n} tables = {overall:.2f} s per table overall; "
          f"start-up ~{startup:.1f} s, first table done at {first['at_s']:.1f} s, table {mark} at {at_mark['at_s']:.1f} s, "
          f"table {n} at {at_end['at_s']:.1f} s, then {summary['packed_tail_after_last_table_s']:.1f} s to exit; "
          f"median table chain {summary['packed_table_duration_median_s']:.2f} s (tables run "
          f"{summary['application_threads']} at a time; step totals: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in packed["step_s_total"].items())
          + f"); other processes used {packed_foreign.cores:.2f} cores meanwhile")
    print(f"target 1: packed cost per additional table (table {mark} -> table {n}) = {marginal:.2f} s "
          f"(target <= 3 s): {'met' if targets['marginal_le_3s'] else 'NOT met'}")
    print(f"target 2: old / packed marginal = {summary['ratio_old_over_packed_marginal']}x (target >= 15x): "
          f"{'met' if targets['ratio_ge_15x'] else 'NOT met'}; old / packed overall = "
          f"{summary['ratio_old_over_packed_overall']}x")
    judged = (f"driver live heap after a full GC x{heap_ratio:.3f}" if heap_ratio is not None
              else f"RSS x{rss_ratio:.3f} (live heap not measured)")
    print(f"target 3: flat driver memory from table {mark} to table {n}, {judged} (target: no growth beyond ~15%): "
          f"{'met' if targets['memory_flat'] else 'NOT met'}")
    print(f"          packed RSS at table {mark} {at_mark['rss_mb']:.0f} MB, at table {n} {at_end['rss_mb']:.0f} MB "
          f"(x{rss_ratio:.3f}; the JVM heap expanding towards driver_memory, which bounds it); "
          f"peak over the batch {packed['peak_rss_mb']:.0f} MB (at {packed['peak_rss_at_s']:.0f} s)")
    print(f"          of which the JVM: {at_mark['jvm_rss_mb']:.0f} -> {at_end['jvm_rss_mb']:.0f} MB, Python processes: "
          f"{at_mark['python_rss_mb']:.0f} -> {at_end['python_rss_mb']:.0f} MB"
          + (f"; driver heap live after a full GC: {live_mark['heap_mb']:.0f} -> {live_end['heap_mb']:.0f} MB, "
             f"metaspace {live_mark['metaspace_mb']:.0f} -> {live_end['metaspace_mb']:.0f} MB"
             if live_mark and live_end else "; driver live heap: not measured (no jcmd, or not ParallelGC)"))
    print(f"packed CPU: {packed['cpu_s']:.0f} CPU s over {packed['wall_s']:.0f} s on {psutil.cpu_count()} cores "
          f"({summary['packed_cpu_utilisation']:.0%} busy)")
    for phase, load in (("old path", old_foreign.cores), ("packed run", packed_foreign.cores)):
        if load > 0.2:
            print(f"WARNING: other processes used {load:.2f} cores on average during the {phase}; "
                  "its figures are pessimistic (rerun on a quiet machine)")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"fleet-{int(time.time())}.json"
    out.write_text(json.dumps({"summary": summary, "targets": targets, "old_path": old,
                               "packed": packed}, indent=2))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
