"""Kafka's log-cleaner metrics for the lakecleaner, sent through Airflow's own metrics (``Stats``):
StatsD, DogStatsD or OpenTelemetry, whichever the deployment's ``[metrics]`` section turns on, so
they land where the rest of Airflow's metrics are already watched.

Names follow Kafka's LogCleaner / LogCleanerManager metrics under the ``lakecleaner`` prefix
(Airflow adds its own ``statsd_prefix``/``otel_prefix`` in front); a per-table figure carries the
table as the tag ``table``. Building the figures is plain Python (unit-tested); ``emit`` is the
only part that touches Airflow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from lakecleaner.core.records import UNCLEANABLE, WITHOUT_FIGURES, RunStatus, RunVerdict

if TYPE_CHECKING:
    from lakecleaner.core.evaluate import Evaluation

PREFIX = "lakecleaner"

# Kafka's names (LogCleanerManager/LogCleaner), one figure over every table
MAX_DIRTY_PERCENT = "max-dirty-percent"
MAX_COMPACTION_DELAY_SECS = "max-compaction-delay-secs"
UNCLEANABLE_COUNT = "uncleanable-partitions-count"  # here: tables, Kafka's partitions
MAX_TIME_SINCE_LAST_RUN_MS = "max-time-since-last-run-ms"
FAILED_TABLES = "failed-tables-count"
# per table (tag "table")
DIRTY_PERCENT = "dirty-percent"
COMPACTION_DELAY_SECS = "compaction-delay-secs"
TIME_SINCE_LAST_RUN_MS = "time-since-last-run-ms"
RECORDS_REMOVED = "records-removed"
RECORDS_QUARANTINED = "records-quarantined"
BYTES_READ = "bytes-read"
BYTES_WRITTEN = "bytes-written"
RUN_DURATION_MS = "run-duration-ms"

GAUGE, COUNT, TIMING = "gauge", "count", "timing"
UNCLEANABLE_STATUSES = UNCLEANABLE  # nothing cleans them until an operator looks


@dataclass(frozen=True)
class Metric:
    """One figure to send: a gauge (a level), a count (added up over runs) or a timing (ms)."""
    name: str
    kind: str
    value: float
    table: str | None = None

    @property
    def stat(self) -> str:
        return f"{PREFIX}.{self.name}"

    @property
    def tags(self) -> dict[str, str]:
        return {"table": self.table} if self.table else {}


def evaluation_metrics(evaluations: Iterable[Evaluation]) -> list[Metric]:
    """From the scheduler's evaluation: each table's dirty percent and compaction delay, the maxima
    over tables, and how many tables are uncleanable."""
    rows = list(evaluations)
    out: list[Metric] = []
    for e in rows:
        if e.status in WITHOUT_FIGURES:
            continue  # no figures: its evaluation says why
        out.append(Metric(DIRTY_PERCENT, GAUGE, round(100 * float(e.dirty_ratio or 0.0), 2), e.table))
        out.append(Metric(COMPACTION_DELAY_SECS, GAUGE, int(e.max_compaction_delay_ms or 0) / 1000, e.table))
    out.append(Metric(MAX_DIRTY_PERCENT, GAUGE,
                      max((m.value for m in out if m.name == DIRTY_PERCENT), default=0.0)))
    out.append(Metric(MAX_COMPACTION_DELAY_SECS, GAUGE,
                      max((m.value for m in out if m.name == COMPACTION_DELAY_SECS), default=0.0)))
    out.append(Metric(UNCLEANABLE_COUNT, GAUGE, sum(e.status in UNCLEANABLE_STATUSES for e in rows)))
    return out


def run_metrics(verdict: RunVerdict, last_success_ms: Mapping[str, int | None], now_ms: int) -> list[Metric]:
    """From the run's verdict (scheduler.summarize): each committed compaction's records removed and
    quarantined, bytes read and written and duration; each table's time since its last successful
    run (``last_success_ms``: table -> the cleaner state's last success); failed tables."""
    out: list[Metric] = []
    for row in verdict.tables:
        f = row.figures
        if f is None or f.run != RunStatus.COMMITTED:  # a dry run or a failed one removed nothing
            continue
        removed = (f.removed_superseded or 0) + (f.removed_expired_tombstones or 0)
        out += [Metric(RECORDS_REMOVED, COUNT, removed, row.table),
                Metric(RECORDS_QUARANTINED, COUNT, f.quarantined or 0, row.table),
                Metric(BYTES_READ, COUNT, f.bytes_read or 0, row.table),
                Metric(BYTES_WRITTEN, COUNT, f.bytes_written or 0, row.table),
                Metric(RUN_DURATION_MS, TIMING, f.duration_ms or 0, row.table)]
    since = {t: max(0, now_ms - ms) for t, ms in last_success_ms.items() if ms}
    out += [Metric(TIME_SINCE_LAST_RUN_MS, GAUGE, ms, t) for t, ms in sorted(since.items())]
    out.append(Metric(MAX_TIME_SINCE_LAST_RUN_MS, GAUGE, max(since.values(), default=0)))
    out.append(Metric(FAILED_TABLES, GAUGE, len(verdict.failed)))
    return out


def overall(metrics: Iterable[Metric]) -> dict[str, float]:
    """The figures without a table, by name: what the DAG keeps as its task's XCom ``metrics``."""
    return {m.name: m.value for m in metrics if m.table is None}


def emit(metrics: Iterable[Metric]) -> int:
    """Send the figures through Airflow's Stats (a no-op unless [metrics] statsd_on, otel_on or
    statsd_datadog_enabled is set); returns how many were sent."""
    from airflow.sdk.observability.stats import Stats

    count = 0
    for m in metrics:
        if m.kind == GAUGE:
            Stats.gauge(m.stat, m.value, tags=m.tags)
        elif m.kind == COUNT:
            Stats.incr(m.stat, count=int(m.value), tags=m.tags)
        else:
            Stats.timing(m.stat, int(m.value), tags=m.tags)
        count += 1
    return count
