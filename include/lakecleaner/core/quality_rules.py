"""The data-quality rules by name: the one definition of the vocabulary that the suite builder
(lakecleaner.spark.quality), the configuration's ``quality.severity`` and the UI share.

A rule's name is what results, alerts and the UI show and what ``quality.severity`` keys on, so it
is spelled here only; the queries that check a rule live with the suites. A new rule is one entry
here and one ``Rule`` built under its constant there (tests/unit/test_config.py holds the two sets
equal).
"""
from __future__ import annotations

from dataclasses import dataclass

from lakecleaner.core.strategies import strategy_names

TOMBSTONE_EXPIRY = "tombstone expiry (delete.retention.ms)"
ONE_RECORD_PER_KEY = "one record per key"
NO_NULL_KEYS = "no null keys outside quarantine"
FORGOTTEN_STAY_FORGOTTEN = "forgotten keys stay forgotten"
OFFSETS_UNIQUE = "offsets unique per partition"
ANOMALOUS_VERSIONS = "anomalous versions below threshold"
FRESHNESS = "freshness (max.compaction.lag.ms)"
TOMBSTONE_NOT_EARLY = "tombstone expiry: none removed early (delete.retention.ms)"


def winner_is_right(strategy: str) -> str:
    """The name of the winner rule under ``strategy`` (one rule per strategy: its offending rows
    mean different things)."""
    if strategy not in strategy_names():
        raise ValueError(f"no such strategy {strategy!r}")
    return f"the winner is right ({strategy} strategy)"


@dataclass(frozen=True)
class QualityRule:
    name: str
    suite: str  # the batch it checks: "table" (the table and its derived columns) or "run history"
    doc: str  # when it is checked and what it holds, for the config schema and the README


RULES: tuple[QualityRule, ...] = (
    QualityRule(TOMBSTONE_EXPIRY, "table", "no tombstone is still present one schedule interval past its "
                "delete.retention.ms horizon (tables with a checkpoint)"),
    QualityRule(ONE_RECORD_PER_KEY, "table", "the cleaned part holds one record per key and partition, except "
                "each partition's log end"),
    *(QualityRule(winner_is_right(s), "table", f"no cleaned record is beaten by another of its key under the "
                  f"{s} strategy (tables on the {s} strategy)") for s in strategy_names()),
    QualityRule(NO_NULL_KEYS, "table", "cleaned keyless records are in the quarantine table, except each "
                "partition's log end"),
    QualityRule(FORGOTTEN_STAY_FORGOTTEN, "table", "no record of a key erased on request (lakecleaner forget) at "
                "or below its partition's highest offset at the request (tables with erasure requests)"),
    QualityRule(OFFSETS_UNIQUE, "table", "one record per (partition, offset): Kafka's contract"),
    QualityRule(ANOMALOUS_VERSIONS, "table", "at most quality.anomalous_share_max of the records lack a valid "
                "version (header and column strategies)"),
    QualityRule(FRESHNESS, "table", "dirty data is cleaned within max.compaction.lag.ms"),
    QualityRule(TOMBSTONE_NOT_EARLY, "run history", "every tombstone a run removed as expired had been in the "
                "cleaned table for at least delete.retention.ms (KIP-534)"),
)
QUALITY_RULES: tuple[str, ...] = tuple(r.name for r in RULES)
SEVERITIES = ("fail", "warn")
