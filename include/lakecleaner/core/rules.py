"""The compaction rules that every caller shares: how a run's budget is shared between partitions,
and the cleaner checkpoint (how far each partition has been cleaned, and when, so that tombstone
horizons can be computed). Which record wins and what a tombstone is (rules 1 and 2) are defined in
strategies.py, in Python beside their SQL.

Pure Python on purpose: the reference model, the Spark job, the scheduler and the data-quality
suites import these definitions instead of restating them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from lakecleaner.core.config import LONG_MAX

# A partition id; None for tables without a partition column (the whole table is one log): the one
# way code says "no partition". Two encodings of it are persisted and stay as they are:
Partition = int | None
NO_PARTITION = "-"  # how None is written in checkpoint JSON (and a run's checkpoint summary)
NO_PARTITION_VALUE = 0  # None as a value of the engine's partition column (the erasure audit's keys)


def partition_value(partition: Partition) -> int:
    """A partition as the engine's partition column holds it (strategies.Strategy.partition_sql)."""
    return NO_PARTITION_VALUE if partition is None else partition

REASON_SUPERSEDED = "superseded"
REASON_EXPIRED_TOMBSTONE = "expired_tombstone"
REASON_QUARANTINED = "quarantined"  # a bad record copied to quarantine by an earlier run, removed now
QUARANTINE_NULL_KEY = "null key"
QUARANTINE_NULL_OFFSET = "null offset"
QUARANTINE_NULL_PARTITION = "null partition"


# Rules 1 and 2 (which record wins, what a tombstone is) live in strategies.py, in Python and SQL.


# ---------------------------------------------------------------- rule 5: tombstone expiry (KIP-534)
def tombstone_expired(first_cleaned_ms: int, now_ms: int, delete_retention_ms: int) -> bool:
    """Kafka's rule: a cleaned tombstone is retained while now < deleteHorizonMs (KIP-534: its first
    cleaning + delete.retention.ms), so it goes once now reaches the horizon."""
    return now_ms - first_cleaned_ms >= delete_retention_ms


def first_clean_time(now_ms: int, committed_ms: int | None) -> int:
    """When a run cleaned what it cleaned, as tombstone horizons count it: the later of its now and
    the commit time of what it committed (its MERGE's snapshot, else its checkpoint). A backfill's
    now lies in the past; a horizon counted from it would remove a tombstone sooner than
    delete.retention.ms after the clean that really happened (Kafka counts from that one)."""
    return now_ms if committed_ms is None else max(now_ms, committed_ms)


def tombstone_check_ms(as_of_ms: int | None, now_ms: int, interval_ms: int) -> int:
    """The instant the tombstone-expiry check judges a table as of: the later of its last run's now
    (``as_of_ms``: that run removed every tombstone expired then, and its checkpoint dates what it
    removed at an entry expired only from that now on, so an earlier instant would see nothing
    expired) and one schedule interval before ``now_ms`` (no tombstone waits longer for a run)."""
    return now_ms - interval_ms if as_of_ms is None else max(now_ms - interval_ms, as_of_ms)


CLOCK_SKEW_MS = 60_000  # how far a typed now may run ahead of this machine's clock (clocks differ)


def check_now_ms(now_ms: int) -> None:
    """A run's now is an epoch time, never before 1970: a checkpoint dated before it is one
    Checkpoint.from_json refuses, so the table would fail every later run until an operator mended it."""
    if now_ms < 0:
        raise ValueError(f"now {now_ms} is before 1970 (epoch milliseconds are never negative)")


def now_in_future(now_ms: int, clock_ms: int) -> bool:
    """A run's now ahead of the clock: refused where a person types it (a backfill's or a test's
    now lies in the past). A run as of the future expires tombstones before delete.retention.ms has
    passed since their first clean, and dates the checkpoint past every real run until then, which
    then skip the table (Checkpoint.later_than)."""
    return now_ms > clock_ms + CLOCK_SKEW_MS


def tombstone_expired_sql(first_cleaned_ms: str, now_ms: str, delete_retention_ms: str) -> str:
    """``tombstone_expired`` as a SQL condition over these expressions, so SQL checks cannot drift
    from it. A difference, as above: first + retention would overflow a bigint for an endless one."""
    return f"(({now_ms}) - ({first_cleaned_ms}) >= ({delete_retention_ms}))"


# ---------------------------------------------------------------- rule 3: the run's budget
def allot_budget(eligible: Mapping[Partition, int], budget: int) -> dict[Partition, int]:
    """Share ``budget`` dirty records between partitions, each taking a prefix of its eligible records
    in offset order. Water-filling: every partition gets the same share r (or all it has), and what
    is left goes one record each to the partitions in partition order. Deterministic."""
    total = sum(eligible.values())
    if total <= budget:
        return dict(eligible)
    parts = sorted(eligible, key=_partition_sort)
    lo, hi = 0, max(eligible.values())
    while lo < hi:  # largest r with sum(min(c, r)) <= budget
        mid = (lo + hi + 1) // 2
        if sum(min(c, mid) for c in eligible.values()) <= budget:
            lo = mid
        else:
            hi = mid - 1
    share = {p: min(eligible[p], lo) for p in parts}
    left = budget - sum(share.values())
    for p in parts:
        if left == 0:
            break
        if eligible[p] > share[p]:
            share[p] += 1
            left -= 1
    return share


def _partition_sort(p: Partition) -> tuple:
    return (p is not None, p if p is not None else 0)


# ---------------------------------------------------------------- rules 6 and 7: a bad record at the log end
def bad_records_at_log_end(bad_ends: Mapping[Partition, int], log_ends: Mapping[Partition, int],
                           retain_log_end_record: bool) -> dict[Partition, int]:
    """Per partition, the offset of the bad record kept in the table as its log end: rule 6 holds
    for a keyless record too, so the highest offset of a partition never goes backwards (it is
    copied to quarantine all the same, once). ``bad_ends``: each partition's highest offset among
    its bad records; ``log_ends``: among all its records. Only records with a place in a partition's
    log count in either: one with a null offset, or a null partition in a partitioned table, is at
    no position of any log, so it is never a log end and always goes."""
    if not retain_log_end_record:
        return {}
    return {p: o for p, o in bad_ends.items() if log_ends.get(p) == o}


def run_ends(taken_ends: Mapping[Partition, int], kept_bad: Mapping[Partition, int],
             fully_taken: Iterable[Partition]) -> dict[Partition, int]:
    """Where the run leaves the checkpoint of each partition: its last record taken, and past a bad
    record it keeps as the log end (copied to quarantine, so examined) when it took every dirty
    record of that partition. Below it, the kept record would count as dirty for ever: a dirty
    ratio that never falls, a compaction delay that only grows. Never past a dirty record the run
    did not take (younger than the lag, or over its budget)."""
    ends = dict(taken_ends)
    for p in set(fully_taken) & set(kept_bad):
        ends[p] = max(kept_bad[p], ends.get(p, kept_bad[p]))
    return ends


# ---------------------------------------------------------------- rule 8: the checkpoint
def _no_repeated_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook: a name given twice in one object is an error. json keeps the last one
    silently, so {"0": 5, "0": 100} would take partition 0 as cleaned through 100."""
    seen: dict[str, Any] = {}
    for name, value in pairs:
        if name in seen:
            raise ValueError(f"the name {_shown(name)} is given twice in one object")
        seen[name] = value
    return seen


@dataclass
class Checkpoint:
    """How far each partition has been cleaned, and the recent runs that moved it.

    ``offsets[p]``: every record of p at or below this offset has been cleaned.
    ``history``: (run time, offsets after that run, winning tombstones that run first cleaned),
    newest last, pruned to what tombstone horizons still need: a tombstone at offset o was first
    cleaned by the earliest entry covering o. The tombstone counts let the scheduler tell from
    metadata alone that some tombstone is due (record statistics cannot: deleted rows keep theirs).
    ``retained``: per partition, the offset of a record kept only because it was the log end: a
    superseded record, whose key the next run re-examines so it does not outlive its replacement,
    or a bad record, which the run copied to quarantine, so later runs do not copy it again and
    remove it once it is no longer the log end.
    A history entry's time is when its run really cleaned (first_clean_time); ``as_of_ms`` is that
    run's now, which decides what was old enough and what had expired.
    """

    offsets: dict[Partition, int] = field(default_factory=dict)
    history: list[tuple[int, dict[Partition, int], int]] = field(default_factory=list)
    retained: dict[Partition, int] = field(default_factory=dict)
    as_of_ms: int | None = None  # the now of the last run that moved the checkpoint

    def later_than(self, now_ms: int) -> bool:
        """The table was cleaned as of a later now than ``now_ms``: a run at now_ms (a backfill of an
        earlier interval) takes nothing, or it would undo or repeat work in an older entry."""
        return self.as_of_ms is not None and now_ms < self.as_of_ms

    def cleaned_through(self, partition: Partition) -> int | None:
        return self.offsets.get(partition)

    def first_cleaned_at(self, partition: Partition, offset: int) -> int | None:
        """When the record was first cleaned; None if not cleaned yet. A cleaned offset older than
        the pruned history was cleaned before the oldest entry kept: return that entry's time."""
        through = self.offsets.get(partition)
        if through is None or offset > through:
            return None
        for at_ms, offsets, _ in self.history:
            if offsets.get(partition, -1) >= offset:
                return at_ms
        return self.history[0][0] if self.history else 0

    def expired_through(self, partition: Partition, now_ms: int, delete_retention_ms: int) -> int | None:
        """Tombstone horizon: the highest offset of ``partition`` whose tombstones have expired at
        now (``tombstone_expired``: first cleaned at least delete.retention.ms before now)."""
        best = None
        for at_ms, offsets, _ in self.history:
            if tombstone_expired(at_ms, now_ms, delete_retention_ms) and partition in offsets:
                best = offsets[partition] if best is None else max(best, offsets[partition])
        return best

    def tombstones_due(self, now_ms: int, delete_retention_ms: int) -> bool:
        """Some tombstone still in the table has passed its horizon (rule 5)."""
        return any(n > 0 and tombstone_expired(at, now_ms, delete_retention_ms) for at, _, n in self.history)

    def advanced(self, now_ms: int, ends: Mapping[Partition, int], retained: Mapping[Partition, int],
                 delete_retention_ms: int, new_tombstones: int = 0, committed_ms: int | None = None) -> "Checkpoint":
        """The checkpoint after a run at ``now_ms`` that cleaned each partition through ``ends`` and
        kept ``new_tombstones`` winning tombstones it cleaned first, committing at ``committed_ms``
        (None: at its now). Tombstones of entries past their horizon at now were removed by this run
        (except one that is its partition's log end, which goes with the run that follows new data
        in that partition); this run's own entry is dated first_clean_time(now, commit)."""
        offsets, changed = dict(self.offsets), {}
        for p, end in ends.items():
            if offsets.get(p) is None or end > offsets[p]:
                offsets[p] = changed[p] = end
        # One boundary for both: the entries whose tombstones expired (so this run removed them)
        # have their counts zeroed and are folded into the newest of them. That dates what they
        # cleaned at a time already past the horizon, so it stays expired; every entry whose
        # tombstones may still be retained is kept as it is, this run's own entry included.
        expired = [tombstone_expired(at, now_ms, delete_retention_ms) for at, _, _ in self.history]
        history = [(at, o, 0 if gone else n) for (at, o, n), gone in zip(self.history, expired)]
        if any(expired):  # oldest first: the newest expired entry bounds all before it
            last = max(i for i, gone in enumerate(expired) if gone)
            history = [_merged(history[:last + 1]), *history[last + 1:]]
        if changed:  # only what this run moved: an entry's partitions are those it cleaned further
            history.append((first_clean_time(now_ms, committed_ms), changed, new_tombstones))
        while len(history) > MAX_HISTORY_ENTRIES:  # an endless retention: merge the two oldest
            history = [_merged(history[:2]), *history[2:]]
        moved = (offsets, history, dict(retained)) != (self.offsets, self.history, self.retained)
        as_of = max(now_ms, self.as_of_ms or now_ms) if moved else self.as_of_ms
        return Checkpoint(offsets=offsets, history=history, retained=dict(retained), as_of_ms=as_of)

    def reset_past_log_end(self, ends: Mapping[Partition, int] | None) -> tuple["Checkpoint", list[Partition]]:
        """The checkpoint without the partitions it claims cleaned past their log end, and those
        partitions. The log end record is never removed while retain_log_end_record holds, so such a
        partition was truncated or recreated; as Kafka resets a cleaner offset past the log end, it
        is cleaned from its start again instead of looking clean forever."""
        past = [p for p, o in self.offsets.items() if ends and p in ends and o > ends[p]]
        return (self.without(past), past) if past else (self, [])

    def reset_other_layout(self, partitioned: bool) -> tuple["Checkpoint", list[Partition]]:
        """The checkpoint without the entries written under the other layout (the table's
        compaction.partition.column was set or unset since), and those entries: NO_PARTITION in a
        partitioned table's checkpoint, partition numbers in an unpartitioned one's. Their offsets
        count another log's records, so they say nothing of this one's: a partition without an entry of
        its own is cleaned from its start."""
        other = sorted((p for p in {*self.offsets, *self.retained} if (p is None) == partitioned), key=lambda p: p or 0)
        return (self.without(other), other) if other else (self, [])

    def vouched(self, partitioned: bool, ends: Mapping[Partition, int] | None
                ) -> tuple["Checkpoint", list[Partition], list[Partition]]:
        """The checkpoint as far as it vouches for the table as it is now, with the partitions reset
        for each reason: entries of the other layout (reset_other_layout), then partitions it claims
        cleaned past their log end (reset_past_log_end; ``ends`` None: the log end may legitimately
        be gone, or the metrics cannot say). A run and its evaluation both start from this."""
        ckpt, other = self.reset_other_layout(partitioned)
        ckpt, past = ckpt.reset_past_log_end(ends)
        return ckpt, other, past

    def without(self, partitions) -> "Checkpoint":
        keep = lambda d: {p: v for p, v in d.items() if p not in partitions}  # noqa: E731
        return Checkpoint(keep(self.offsets), [(at, keep(o), n) for at, o, n in self.history], keep(self.retained),
                          self.as_of_ms)

    # JSON, stored as the table property lakecleaner.checkpoint
    def to_json(self) -> str:
        enc = lambda d: {(NO_PARTITION if p is None else str(p)): v for p, v in d.items()}  # noqa: E731
        doc = {"offsets": enc(self.offsets), "history": [[at, enc(o), n] for at, o, n in self.history],
               "retained": enc(self.retained)}
        if self.as_of_ms is not None:
            doc["as_of_ms"] = self.as_of_ms
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> "Checkpoint":
        """The stored checkpoint, checked for the shape ``to_json`` writes: anything else (a hand
        edit, a half-written value, another tool's property) raises CheckpointError, never a
        TypeError from deep inside a run; nor a RecursionError (a hostile value of nested brackets
        would otherwise stop every reader, the whole evaluation with it). The value is never shown."""
        if text is None or not str(text).strip():
            return cls()
        if len(text) > MAX_CHECKPOINT_CHARS:
            raise CheckpointError(f"{len(text)} characters, more than the {MAX_CHECKPOINT_CHARS} a checkpoint "
                                  "this cleaner writes may take")
        try:
            return cls._parsed(text)
        except RecursionError:
            raise CheckpointError("nested too deeply to be a checkpoint") from None

    @classmethod
    def _parsed(cls, text: str) -> "Checkpoint":
        try:
            data = json.loads(text, object_pairs_hook=_no_repeated_names)
        except ValueError as exc:
            raise CheckpointError(f"not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"expected an object with offsets, history and retained, got {_shown(data)}")
        unknown = sorted(set(data) - {"offsets", "history", "retained", "as_of_ms"})
        if unknown:
            raise CheckpointError(f"unknown field(s) {', '.join(map(repr, unknown))}")
        history = data.get("history", [])
        if not isinstance(history, list):
            raise CheckpointError(f"history: expected a list of [run time, offsets, tombstones], got {_shown(history)}")
        offsets = _offsets_from_json(data.get("offsets", {}), "offsets")
        entries = [_history_entry(h, i) for i, h in enumerate(history)]
        _history_within(offsets, entries)
        return cls(offsets=offsets, history=entries,
                   retained=_offsets_from_json(data.get("retained", {}), "retained"),
                   as_of_ms=None if data.get("as_of_ms") is None else _int(data["as_of_ms"], "as_of_ms", 0))


# The longest lakecleaner.checkpoint read. A checkpoint of 1,000 partitions whose every history entry
# (MAX_HISTORY_ENTRIES of them) moved every partition takes 4 MB; anything longer is refused unparsed.
MAX_CHECKPOINT_CHARS = 8 * 2**20

# History entries kept at most. Merging two entries dates the older one's offsets at the newer one's
# time: their tombstones are judged first cleaned later, so they expire later, never early.
MAX_HISTORY_ENTRIES = 200


def _merged(entries: list[tuple[int, dict, int]]) -> tuple[int, dict, int]:
    """Consecutive history entries as one, at the newest one's time: the offsets each partition
    reached by then (offsets only grow), the tombstones all of them counted."""
    offsets: dict[Partition, int] = {}
    for _, o, _ in entries:
        for p, v in o.items():
            offsets[p] = max(v, offsets.get(p, v))
    return entries[-1][0], offsets, sum(n for _, _, n in entries)


class CheckpointError(ValueError):
    """lakecleaner.checkpoint holds something this cleaner did not write."""

    def __init__(self, problem: str):
        super().__init__(f"invalid checkpoint: {problem}")


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


LONG_MIN = -LONG_MAX - 1


def _int(value, where: str, minimum: int = LONG_MIN) -> int:
    """An Iceberg long (offsets, partitions, times): JSON's integers have no bound, and one past a
    long failed deep inside Spark (a literal, a decimal) or made a partition clean for ever."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= LONG_MAX:
        raise CheckpointError(f"{where}: expected an integer from {minimum} to {LONG_MAX}, got {_shown(value)}")
    return value


def _offsets_from_json(value, where: str) -> dict[Partition, int]:
    if not isinstance(value, dict):
        raise CheckpointError(f"{where}: expected an object of partition -> offset, got {_shown(value)}")
    out: dict[Partition, int] = {}
    for p, offset in value.items():
        if p == NO_PARTITION:
            partition = None
        else:
            # as to_json writes a long: int() also takes "1_0", other scripts' digits, and "01" beside "1",
            # two entries of one partition of which the dict would silently keep either
            if not re.fullmatch(r"0|-?[1-9][0-9]{0,18}", p):
                raise CheckpointError(f"{where}: partition {p[:40]!r} is not an integer as the cleaner writes one, "
                                      f"or {NO_PARTITION!r}")
            partition = _int(int(p), f"{where}: partition")
        out[partition] = _int(offset, f"{where}[{p}]")
    return out


def _history_entry(entry, i: int) -> tuple[int, dict[Partition, int], int]:
    where = f"history[{i}]"
    if not isinstance(entry, list) or len(entry) not in (2, 3):
        raise CheckpointError(f"{where}: expected [run time, offsets, tombstones], got {_shown(entry)}")
    tombstones = _int(entry[2], f"{where} tombstones", 0) if len(entry) == 3 else 0
    return _int(entry[0], f"{where} run time", 0), _offsets_from_json(entry[1], f"{where} offsets"), tombstones


def _history_within(offsets: dict[Partition, int], history: list[tuple[int, dict[Partition, int], int]]) -> None:
    """Each history entry records offsets a run cleaned through, which the checkpoint's offsets (the
    furthest of them; offsets only grow, and a reset drops a partition from both) therefore cover.
    An entry past them would date records the checkpoint does not call clean: the quality checks
    would judge tombstones by it."""
    for i, (_, entry, _) in enumerate(history):
        for p, offset in entry.items():
            if p not in offsets or offsets[p] < offset:
                name = NO_PARTITION if p is None else str(p)
                raise CheckpointError(f"history[{i}] offsets: partition {name} cleaned through {offset}, past the "
                                      f"offsets' {offsets.get(p, 'none')}")


def log_ends(files: Iterable[tuple[Partition, int | None]], partitioned: bool) -> dict[Partition, int] | None:
    """Each partition's highest offset from data-file metrics: (the file's one partition, its offset
    upper bound) per file. None when a file cannot say: no offset bound, or (partitioned) no single
    partition."""
    ends: dict[Partition, int] = {}
    for partition, upper in files:
        if upper is None or (partitioned and partition is None):
            return None
        key = partition if partitioned else None
        ends[key] = max(upper, ends.get(key, upper))
    return ends
