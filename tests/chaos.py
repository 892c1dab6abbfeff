"""`make chaos`: cleaning runs killed with SIGKILL at random points while another process appends.

On Iceberg's JDBC catalog on a real PostgreSQL (safe for writers in several processes), each round:
1. an appender (its own JVM, running for the whole series) commits a few batches, keyless records
   and tombstones among them, while
2. a cleaner application (spark-submit of jobs/clean.py, the DAG's chain: compact, maintain,
   validate) is killed with SIGKILL: at a named point (after quarantine, between the MERGE's commit
   and the checkpoint, after maintenance's rewrite) or at a random moment of its chain (the whole
   process group, JVM and Python at once);
3. the cleaner's state and data-quality documents must still read;
4. the next run (in this process's Spark application, the same batch code), from whatever the
   killed one left, must complete and leave exactly what the reference model says, and no
   appended record may be lost: every key's latest record is in the table, every keyless one in
   quarantine.

`python tests/chaos.py --runs 20` prints the figures; tests/spark/test_chaos.py runs a short series.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import threading

from lakecleaner.spark.batch import BatchRequest, clean_tables
from lakecleaner.core.config import LakecleanerConfig, config_document
from lakecleaner.core.table import TableRef
from lakecleaner.spark.engine import quarantine_table
from lakecleaner.core.model import compact
from lakecleaner.core.quality_results import list_results
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.state import StateStore, read_document
from lakecleaner.core.submit import parse_results, submit_command
from lakecleaner_dev.tables import create_compacted_table, read_model_records

NAMED_KILLS = ("after_quarantine", "after_merge", "maintenance_after_rewrite")
KINDS = (*NAMED_KILLS, "random")
KEYS, PARTITIONS, BATCH = 40, 2, 20
TABLE_PROPERTIES = {"max.compaction.lag.ms": "60000", "delete.retention.ms": str(86_400_000)}


def appended_row(offset: int) -> dict:
    """The appender's record at ``offset``: a key always lands in the same partition, as in Kafka;
    every 17th record has no key (quarantined), every 11th is a tombstone (KIP-87's null value)."""
    key = None if offset % 17 == 5 else f"k{offset % KEYS}"
    return {"key": key, "offset": offset, "partition": offset % KEYS % PARTITIONS,
            "value": None if offset % 11 == 0 else f"v{offset}"}


APPENDER = """
import sys
from lakecleaner.core.config import load_config
from lakecleaner.core.table import TableRef
from lakecleaner.spark.engine import quarantine_table
from lakecleaner.spark.session import get_spark
from lakecleaner_dev.tables import append
sys.path.insert(0, sys.argv[3])
from chaos import BATCH, appended_row
cfg = load_config(sys.argv[1])
spark = get_spark(cfg, "chaos-appender")
ref = TableRef.parse(sys.argv[2], cfg.catalog.name)
print("ready", flush=True)
start = 0
for line in sys.stdin:  # "<n>": append n batches, then say so
    for _ in range(int(line)):
        append(spark, ref, [appended_row(o) for o in range(start, start + BATCH)])
        start += BATCH
    print("appended", start, flush=True)
"""


@dataclass
class ChaosReport:
    runs: int = 0
    kills: Counter = field(default_factory=Counter)  # kind -> runs killed so
    not_reached: Counter = field(default_factory=Counter)  # named point the run never reached
    random_kill_steps: Counter = field(default_factory=Counter)  # chain step a random kill landed in
    recovered: int = 0  # next runs that completed and matched the reference model
    records_appended: int = 0
    records_lost: int = 0
    unreadable_documents: int = 0
    seconds: float = 0.0

    def lines(self) -> list[str]:
        return [f"killed runs: {self.runs} ({dict(self.kills)}; named point not reached: {dict(self.not_reached)})",
                f"random kills landed in (estimated from the baseline's steps): {dict(self.random_kill_steps)}",
                f"next run completed and equal to the reference model: {self.recovered}/{self.runs}",
                f"records appended meanwhile: {self.records_appended}, lost: {self.records_lost}",
                f"unreadable state or results documents: {self.unreadable_documents}",
                f"wall time: {self.seconds:.0f} s"]


@dataclass(frozen=True)
class RunResult:
    code: int
    outcome: dict | None  # the table's result line; None if killed before it
    seconds: float


class Chaos:
    def __init__(self, spark, cfg: LakecleanerConfig, workdir: Path, seed: int, log=print):
        self.spark, self.cfg, self.workdir, self.log = spark, cfg, workdir, log
        self.rng = random.Random(seed)
        self.table = f"chaos{int(time.time() * 1000) % 10**8}.events"
        self.ref = TableRef.parse(self.table, cfg.catalog.name)
        self.config_path = workdir / "lakecleaner.yaml"
        self.appended = 0
        self.chain_s, self.step_s = 0.0, {}

    # ------------------------------------------------------------ processes
    def write_config(self) -> None:
        doc = config_document(self.cfg)
        doc["spark"].update(master="local[2]", driver_memory="1g")
        self.config_path.write_text(yaml.safe_dump(doc))

    def start_appender(self) -> subprocess.Popen:
        script = self.workdir / "appender.py"
        script.write_text(APPENDER)
        proc = subprocess.Popen([sys.executable, str(script), str(self.config_path), self.table,
                                 str(Path(__file__).parent)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=open(self.workdir / "appender.log", "w"), text=True)
        assert proc.stdout.readline().strip() == "ready", "the appender did not start (see appender.log)"
        return proc

    def killed_run(self, round_no: int, now_ms: int, kill: str) -> RunResult:
        """One cleaner application (spark-submit, as the DAG runs it) with ``kill``: a named point
        or "random"."""
        args = [self.table, "--now-ms", str(now_ms), "--record-outcomes", "--run-name", f"chaos-{round_no}"]
        env = {"SPARK_LOCAL_IP": "127.0.0.1", **os.environ, "PYSPARK_PYTHON": sys.executable}
        env.pop("LAKECLEANER_FAIL_AT", None)
        if kill in NAMED_KILLS:
            env["LAKECLEANER_FAIL_AT"] = f"kill:{kill}"
        with tempfile.TemporaryDirectory(prefix="chaos-submit-") as tmp:
            cmd = submit_command(self.cfg, str(self.config_path), "clean.py", args, tmp)
            started = time.time()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                    start_new_session=True)
            lines: list[str] = []
            chain_started = threading.Event()
            reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines, chain_started), daemon=True)
            reader.start()
            if kill == "random":
                self._kill_at_random(proc, chain_started)
            proc.wait()
            reader.join(timeout=60)
        results = parse_results("\n".join(lines))
        return RunResult(proc.returncode, results[0] if results else None, time.time() - started)

    def _kill_at_random(self, proc: subprocess.Popen, chain_started: threading.Event) -> None:
        """SIGKILL the whole application (JVM and Python at once) at a uniform moment of the table's
        chain (as long as the baseline's), counted from the batch's "started" line."""
        if not chain_started.wait(timeout=600):
            return
        into = self.rng.uniform(0, self.chain_s)
        try:
            proc.wait(timeout=into)
            return  # finished before the kill
        except subprocess.TimeoutExpired:
            pass
        os.killpg(proc.pid, signal.SIGKILL)
        self.report.random_kill_steps[self._step_at(into)] += 1

    def _step_at(self, into_chain_s: float) -> str:
        elapsed = 0.0
        for step in ("compact", "maintain", "validate"):
            elapsed += self.step_s.get(step, 0)
            if into_chain_s < elapsed:
                return step
        return "after the chain"

    def clean_in_process(self, round_no: int, now_ms: int):
        """The next run, in this process's Spark application: the same batch code the job runs."""
        request = BatchRequest((self.table,), now_ms, run_name=f"chaos-{round_no}-next", record_outcomes=True)
        return clean_tables(self.spark, self.cfg, request, emit=lambda line: None)[0]

    # ------------------------------------------------------------ checks
    def documents_readable(self) -> bool:
        try:
            StateStore(self.cfg).get(self.table)
            for name in ("", ".clear"):
                read_document(self.cfg, f"state/{self.table}{name}.json")
            list_results(self.cfg, self.table)  # rows of the results table (pyiceberg)
            return True
        except Exception as exc:  # noqa: BLE001 - counted and shown
            self.log(f"  unreadable document: {type(exc).__name__}: {exc}")
            return False

    def _refresh(self) -> None:
        for name in (self.ref, quarantine_table(self.cfg, self.ref)):
            try:
                self.spark.catalog.refreshTable(name.sql().replace("`", ""))
            except Exception:  # noqa: BLE001 - not created yet
                pass

    def _ids(self, ref: TableRef) -> list[tuple[int, int]]:
        if not self.spark.catalog.tableExists(ref.sql().replace("`", "")):
            return []
        return sorted((r["partition"], r["offset"]) for r in
                      self.spark.table(ref.sql()).select("partition", "offset").collect())

    def recover_and_check(self, round_no: int) -> bool:
        """The next run, on whatever the killed one left: completes, equals the model, loses nothing."""
        self._refresh()
        now = int(time.time() * 1000)
        records, tc = read_model_records(self.spark, self.cfg, self.table)
        props = {r["key"]: r["value"] for r in self.spark.sql(f"SHOW TBLPROPERTIES {self.ref.sql()}").collect()}
        outcome = compact(records, Checkpoint.from_json(props.get("lakecleaner.checkpoint")), tc, now)
        run = self.clean_in_process(round_no, now)
        self._refresh()
        ok = run.status == "ok"
        kept = self._ids(self.ref)
        equal = kept == sorted(r.id for r in outcome.survivors(records))
        lost = self._lost(set(kept), set(self._ids(quarantine_table(self.cfg, self.ref))))
        self.report.records_lost += lost
        if not (ok and equal and not lost):
            self.log(f"  round {round_no}: next run ok={ok} equal to model={equal} lost={lost}: {run.error}")
        return ok and equal and not lost

    def _lost(self, kept: set, quarantined: set) -> int:
        """Appended records whose loss compaction cannot explain: a key's latest record missing from
        the table, or a keyless record in neither the table nor quarantine."""
        latest = {}
        missing = 0
        for offset in range(self.appended):
            row = appended_row(offset)
            if row["key"] is None:
                missing += (row["partition"], offset) not in kept | quarantined
            else:
                latest[row["key"]] = (row["partition"], offset)
        return missing + sum(rid not in kept for rid in latest.values())

    # ------------------------------------------------------------ the series
    def run(self, kinds: list[str]) -> ChaosReport:
        self.report = ChaosReport()
        started = time.time()
        self.write_config()
        create_compacted_table(self.spark, self.cfg, self.table, TABLE_PROPERTIES)
        appender = self.start_appender()
        try:
            self._append(appender, 3)
            self._appended(appender)
            baseline = self.clean_in_process(0, int(time.time() * 1000))
            assert baseline.status == "ok", baseline
            self.chain_s, self.step_s = baseline.duration_ms / 1000, {k: v / 1000 for k, v in baseline.step_ms.items()}
            self.log(f"baseline chain (in process): {self.chain_s:.1f} s {self.step_s}")
            self._append(appender, 1)
            for round_no, kind in enumerate(kinds, start=1):
                self._round(appender, round_no, kind)
        finally:
            appender.stdin.close()
            appender.wait(timeout=120)
        self.report.records_appended = self.appended
        self.report.seconds = time.time() - started
        return self.report

    def _append(self, appender: subprocess.Popen, batches: int) -> None:
        appender.stdin.write(f"{batches}\n")
        appender.stdin.flush()

    def _appended(self, appender: subprocess.Popen) -> None:
        line = appender.stdout.readline().split()
        assert line and line[0] == "appended", f"the appender stopped (see {self.workdir}/appender.log)"
        self.appended = int(line[1])

    def _round(self, appender: subprocess.Popen, round_no: int, kind: str) -> None:
        self._appended(appender)
        self._append(appender, self.rng.randint(2, 6))  # commits while the cleaner runs and is killed
        run = self.killed_run(round_no, int(time.time() * 1000), kill=kind)
        self._appended(appender)
        killed = run.code == -signal.SIGKILL or (run.outcome is None and run.code != 0)
        self.report.runs += 1
        self.report.kills[kind if killed else "none"] += 1
        if not killed and kind in NAMED_KILLS:
            self.report.not_reached[kind] += 1
        self.report.unreadable_documents += not self.documents_readable()
        recovered = self.recover_and_check(round_no)
        self.report.recovered += recovered
        self.log(f"round {round_no}: kill {kind} ({'killed' if killed else 'ran to the end'}, {run.seconds:.1f} s); "
                 f"next run {'recovered' if recovered else 'FAILED'}; {self.appended} records appended")
        self._append(appender, 1)


def _read_lines(stream, lines: list[str], chain_started: threading.Event) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))
        if line.rstrip().endswith(": started"):
            chain_started.set()


def series(runs: int, rng: random.Random) -> list[str]:
    """Every kind of kill once, then kinds drawn at random."""
    return [*KINDS, *(rng.choice(KINDS) for _ in range(max(runs - len(KINDS), 0)))][:runs]


def main() -> int:
    from lakecleaner_dev import localpg
    from lakecleaner.core.config import SparkConfig
    from lakecleaner.spark.session import get_spark

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--seed", type=int, default=int(time.time()))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakecleaner-chaos-") as tmp, localpg.local_postgres() as server:
        work = Path(tmp)
        cfg = LakecleanerConfig(catalog=localpg.jdbc_catalog(server, work / "warehouse", "chaos"),
                                spark=SparkConfig(master="local[2]", driver_memory="1g",
                                                  extra_jars=(localpg.JDBC_JAR,)))
        spark = get_spark(cfg, "lakecleaner-chaos")
        print(f"chaos: {args.runs} killed runs, seed {args.seed}", flush=True)
        chaos = Chaos(spark, cfg, work, args.seed, log=lambda line: print(line, flush=True))
        report = chaos.run(series(args.runs, random.Random(args.seed)))
        spark.stop()
    print("\n".join(report.lines()))
    failed = report.recovered < report.runs or report.records_lost or report.unreadable_documents
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
