"""The data-quality rules by name: the one definition of the vocabulary that the suite builder
(lakecleaner.spark.quality), the configuration's ``quality.severity`` and the UI share.

A rule's name is what results, alerts and the UI show and what ``quality.severity`` keys on, so it
is spelled here only; the queries that check a rule live with the suites, and a reader of a kept
result finds a rule by its name here (``rule_named``), never by its text. A new rule is one
``QualityRule`` here, listed in ``rules()``, and one ``Rule`` built on it there
(tests/unit/test_config.py holds the two sets equal). The winner rule is one per registered
strategy (lakecleaner.core.strategies): a new strategy brings its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from lakecleaner.core.strategies import strategy_class, strategy_names


class Suite(StrEnum):
    """The batch a rule checks."""
    TABLE = "table"  # the table and its derived columns
    RUN_HISTORY = "run history"  # the table's rows of the run history


@dataclass(frozen=True)
class QualityRule:
    name: str  # what results, alerts and the UI show, and quality.severity keys on
    suite: Suite
    doc: str  # when it is checked and what it holds, for the config schema and the README
    figure: str | None = None  # the column of its offending row that carries the rule's figure, if any


TOMBSTONE_EXPIRY = QualityRule(
    "tombstone expiry (delete.retention.ms)", Suite.TABLE,
    "no tombstone is still present that had passed its delete.retention.ms horizon by the last run's now, or one "
    "schedule interval before the check, whichever is later (tables with a checkpoint)")
ONE_RECORD_PER_KEY = QualityRule(
    "one record per key", Suite.TABLE,
    "the cleaned part holds one record per key and partition, except each partition's log end")
NO_NULL_KEYS = QualityRule(
    "no null keys outside quarantine", Suite.TABLE,
    "cleaned keyless records are in the quarantine table, except each partition's log end")
FORGOTTEN_STAY_FORGOTTEN = QualityRule(
    "forgotten keys stay forgotten", Suite.TABLE,
    "no record of a key erased on request (lakecleaner forget) at or below its partition's highest offset at "
    "the request (tables with erasure requests)")
OFFSETS_UNIQUE = QualityRule(
    "offsets unique per partition", Suite.TABLE, "one record per (partition, offset): Kafka's contract")
ANOMALOUS_VERSIONS = QualityRule(
    "anomalous versions below threshold", Suite.TABLE,
    "at most quality.anomalous_share_max of the records lack a valid version (header and column strategies)")
FRESHNESS = QualityRule(
    "freshness (max.compaction.lag.ms)", Suite.TABLE, "dirty data is cleaned within max.compaction.lag.ms",
    figure="max_compaction_delay_ms")
TOMBSTONE_NOT_EARLY = QualityRule(
    "tombstone expiry: none removed early (delete.retention.ms)", Suite.RUN_HISTORY,
    "every tombstone a run removed as expired had been in the cleaned table for at least delete.retention.ms "
    "(KIP-534)")


def winner_is_right(strategy: str) -> QualityRule:
    """The winner rule under ``strategy`` (one rule per strategy: its offending rows mean different
    things). ValueError for a strategy that is not registered."""
    name = strategy_class(strategy).name
    return QualityRule(f"the winner is right ({name} strategy)", Suite.TABLE,
                       f"no cleaned record is beaten by another of its key under the {name} strategy (tables on "
                       f"the {name} strategy)")


def rules() -> tuple[QualityRule, ...]:
    """Every rule, in the order the schema and the README list them (the strategies' as registered now)."""
    return (TOMBSTONE_EXPIRY, ONE_RECORD_PER_KEY, *(winner_is_right(s) for s in strategy_names()), NO_NULL_KEYS,
            FORGOTTEN_STAY_FORGOTTEN, OFFSETS_UNIQUE, ANOMALOUS_VERSIONS, FRESHNESS, TOMBSTONE_NOT_EARLY)


def rule_names() -> tuple[str, ...]:
    """What quality.severity keys on and results name rules by."""
    return tuple(r.name for r in rules())


def rule_named(name: str | None) -> QualityRule | None:
    """The rule a kept result names (None: no rule of the registry, e.g. one since renamed)."""
    return next((r for r in rules() if r.name == name), None)


class Severity(StrEnum):
    """What a failed rule does (quality.severity): fail the validation, or be logged as a warning."""
    FAIL = "fail"
    WARN = "warn"


# The words quality.severity takes; a rule not named there fails the validation.
SEVERITIES: tuple[str, ...] = tuple(s.value for s in Severity)
