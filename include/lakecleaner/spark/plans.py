"""Phase 2 of a run: deciding what goes, as a plan a run commits with one MERGE.

- The key map (``key_map_plan``), for every strategy: Kafka's own cleaner. Each run key's record
  that stays by KIP-280's keep rule, then one MERGE deleting every other record of the key up to
  its highest offset in the run. Under a versioned strategy the map also holds each key's cleaned
  record that may beat the run's best, found by one read of the clean part in the same aggregation
  (``CleanRivals``): a late lower version loses to its cleaned winner. Bad records going to
  quarantine join the MERGE's source by their exact identity.
- The ranked path (``ranked_plan``), only where a log end an earlier run kept must be examined
  again (rule 6). Every candidate is ranked by the same rule.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Mapping

from pyspark.sql import Column, DataFrame, SparkSession, functions as F, Window

from lakecleaner.core.table import CompactionError, TableRef
from lakecleaner.core.config import TableConfig
from lakecleaner.spark.frames import (LONG_MIN, Frames, at_log_ends, at_positions, join_side, match_columns, merge_delete,
                                      small_df, temp_view)
from lakecleaner.spark.phases import (BadFigures, CleanPart, CleanRivals, EnginePartition, Held, KeyMap, Offsets,
                                      PartitionSums, RunRange, RunStart)
from lakecleaner.core.rules import REASON_EXPIRED_TOMBSTONE, REASON_SUPERSEDED
from lakecleaner.core.strategies import (RankBounds, Strategy, checkpoint_sql, ident, long_as_version_sql, version_as_long_sql)


@dataclass(frozen=True)
class RunContext:
    """What both ways of deciding a run share: the run's start, range and clean part as the phases
    handed them over, the run's ends, and each partition's log end (rule 6)."""
    spark: SparkSession
    start: RunStart
    run: RunRange
    part: CleanPart
    hold: Held
    ends: Offsets  # partition -> the run's last offset there (bad records kept as the log end included)
    log_end: Offsets  # partition -> its log end

    @property
    def ref(self) -> TableRef:
        return self.start.ref

    @property
    def tc(self) -> TableConfig:
        return self.start.tc

    @property
    def fr(self) -> Frames:
        return self.start.fr

    @cached_property
    def log_end_df(self) -> DataFrame:
        """log_end as a broadcast side (p, log_end)."""
        return F.broadcast(small_df(self.spark, self.log_end or {0: -1}, "log_end"))

    @cached_property
    def protected(self) -> Column:
        """A record joined with log_end_df that stays as its partition's log end (rule 6)."""
        return F.lit(self.tc.retain_log_end_record) & (F.col("o") == F.col("log_end"))


@dataclass(frozen=True)
class Plan(ABC):
    """A decided run: what it removes as expired tombstones, the tombstones it newly cleans, the log
    ends it keeps though they lose (rule 6); ``commit`` deletes with one MERGE, ``figures`` says
    what went."""
    expired: int
    expired_by_partition: Offsets  # partition -> highest offset of a tombstone removed as expired
    new_tombstones: int
    new_retained: Offsets

    @property
    def deletes_by_key_through(self) -> Offsets:
        """Per partition, the offset up to which the MERGE deletes by key rather than by exact
        identity, where a record appended during the run would go unseen (guards.before_commit).
        The ranked path deletes by identity only: none."""
        return {}

    @abstractmethod
    def commit(self, run_id: str) -> bool:
        """Delete what the plan removes; False when there was nothing to delete (no commit)."""

    @abstractmethod
    def figures(self, summary: Mapping[str, str] | None) -> tuple[int, int]:
        """(removed as superseded, records read), from the commit's snapshot summary, or for a dry
        run (summary None) without committing."""


@dataclass(frozen=True)
class RankedPlan(Plan):
    """Removals by exact identity: ranked losers, expired tombstones, and the bad records that go."""
    ctx: RunContext
    decided: DataFrame  # every candidate with its reason to go (null: stays)
    bad_rows: DataFrame | None
    n_bad: int
    superseded: int
    read: int

    def commit(self, run_id: str) -> bool:
        fr = self.ctx.fr
        removals = self.decided.where(F.col("reason").isNotNull()).select(*[n for n, _ in fr.match])
        if self.bad_rows is not None:
            removals = removals.unionByName(self.bad_rows.select(*[c.alias(n) for n, c in fr.match]))
        if not self.superseded + self.expired + self.n_bad:
            return False
        removals = join_side(removals, self.superseded + self.expired + self.n_bad)
        on = " AND ".join(f"t.{ident(col)} <=> r.{alias}" for alias, col in match_columns(self.ctx.tc))
        merge_delete(self.ctx.spark, self.ctx.ref, removals, on, alias="r", name=f"lakecleaner_removals_{run_id}")
        return True

    def figures(self, summary: Mapping[str, str] | None) -> tuple[int, int]:
        return self.superseded, self.read


def ranked_plan(ctx: RunContext, bad_rows: DataFrame | None, n_bad: int) -> Plan:
    """Look up the cleaned records of the run's keys, rank every candidate by the strategy, and
    remove the losers (plus expired tombstones and ``bad_rows``, the bad records that go) by exact
    identity."""
    fr, clean, in_run, retained = ctx.fr, ctx.part.clean, ctx.run.in_run, ctx.start.retained
    expired_clean = ctx.part.expired_clean
    run_keys = in_run.select("p", "key")
    if retained:  # keys of records kept only as the log end are examined again
        run_keys = run_keys.unionByName(clean.where(at_positions(F.col("p"), F.col("o"), retained)).select("p", "key"))
    run_keys = run_keys.distinct()
    run_keys = join_side(run_keys, ctx.run.n_run + len(retained))
    clean_cand = clean.join(run_keys, ["p", "key"], "left_semi")
    cands = (in_run.drop("anom").withColumn("in_run", F.lit(True))
             .unionByName(clean_cand.withColumn("in_run", F.lit(False))))
    # Clean tombstones past their horizon: those whose key has candidates are ranked with them; the
    # rest are winners by the clean-part invariant (one record per key), so they go without ranking.
    if expired_clean is not None:
        cands = cands.join(expired_clean.select("p", "o", F.lit(True).alias("expired_tomb")), ["p", "o"], "left")
    else:
        cands = cands.withColumn("expired_tomb", F.lit(None).cast("boolean"))
    w = Window.partitionBy("p", "key").orderBy(*[F.col(c).desc() for c in fr.strategy.winner_order()])
    ranked = (cands.withColumn("rn", F.row_number().over(w)).withColumn("winner_o", F.first("o").over(w))
              .join(ctx.log_end_df, "p", "left"))
    protected = ctx.protected
    decided = ranked.select(
        "p", "o", "in_run", *[n for n, _ in fr.match],
        F.when((F.col("rn") > 1) & ~protected & (F.col("o") != F.col("winner_o")), F.lit(REASON_SUPERSEDED))
        .when((F.col("rn") == 1) & F.coalesce("expired_tomb", F.lit(False)) & ~F.col("in_run") & ~protected,
              F.lit(REASON_EXPIRED_TOMBSTONE)).alias("reason"),
        ((F.col("rn") > 1) & protected).alias("retained"),
        ((F.col("rn") == 1) & F.col("tomb") & F.col("in_run")).alias("new_tombstone"))
    if expired_clean is not None:
        expiry_only = expired_clean.join(run_keys, ["p", "key"], "left_anti")
        decided = decided.unionByName(
            expiry_only.join(ctx.log_end_df, "p", "left").select(
                "p", "o", F.lit(False).alias("in_run"), *[n for n, _ in fr.match],
                F.when(~protected, F.lit(REASON_EXPIRED_TOMBSTONE)).alias("reason"),
                F.lit(False).alias("retained"), F.lit(False).alias("new_tombstone")))
    decided = ctx.hold(decided)
    figures = decided.agg(
        F.count("*").alias("read"),
        F.sum(F.when(F.col("reason") == REASON_SUPERSEDED, 1).otherwise(0)).alias("superseded"),
        F.sum(F.when(F.col("reason") == REASON_EXPIRED_TOMBSTONE, 1).otherwise(0)).alias("expired"),
        F.sum(F.col("new_tombstone").cast("int")).alias("new_tombstones")).collect()[0]
    new_retained = {r["p"]: r["o"] for r in decided.where("retained").select("p", "o").collect()}
    superseded, expired = int(figures["superseded"] or 0), int(figures["expired"] or 0)
    expired_by_partition = {}
    if expired:
        expired_by_partition = {r["p"]: r["o"] for r in decided.where(F.col("reason") == REASON_EXPIRED_TOMBSTONE)
                                .groupBy("p").agg(F.max("o").alias("o")).collect()}

    return RankedPlan(expired=expired, expired_by_partition=expired_by_partition,
                      new_tombstones=int(figures["new_tombstones"] or 0), new_retained=new_retained, ctx=ctx,
                      decided=decided, bad_rows=bad_rows, n_bad=n_bad, superseded=superseded,
                      read=int(figures["read"]))


def bad_figures(fr: Frames, bad_rows: DataFrame, retained: Offsets) -> tuple[BadFigures, ...]:
    """Per partition (None: a null partition), the bad records, their highest offset, and how many
    of them an earlier run copied to quarantine and kept as the log end (those in ``retained``)."""
    return tuple(BadFigures(p=r["p"], n=int(r["n"]), end=r["end"], copied_before=int(r["copied_before"] or 0))
                 for r in bad_rows.groupBy(fr.p.alias("p")).agg(
                     F.count("*").alias("n"), F.max(fr.o).alias("end"),
                     F.sum(at_positions(fr.p, fr.o, retained).cast("int")).alias("copied_before")).collect())


def key_map(in_run: DataFrame, strategy: Strategy, bounds: RankBounds | None = None,
            rivals: CleanRivals | None = None) -> DataFrame:
    """Kafka's offset map, for every strategy: each of the run's keys with its best record in the
    run by the keep rule (its offset ``winner_o``; under a versioned strategy also the whole rank),
    whether that record is a tombstone, the key's highest offset in the run (``top_o``), how many
    records (and anomalous ones) of the key the run holds, and under a versioned strategy the
    cleaned record that beats the run's best (``clean_o``, null: none; ``clean_expired``: it is a
    tombstone past its horizon), found through ``rivals``. A versioned rank is packed into one
    bigint where Iceberg's metrics bound the run (``bounds``, strategies.packed_rank_sql): Spark
    then aggregates in a hash table, not by sorting; ``outside`` counts run records outside the
    bounds, which stop the run (key_map_sums)."""
    found = _clean_rivals(in_run, strategy, rivals) if strategy.versioned and rivals is not None else None
    rows = in_run.selectExpr("p", "key", "o", "tomb", "ver", "has_ver", "true AS in_run")
    rival_aggs = []
    if found is not None:  # the run's records and the cleaned ones found (in_run null), each with the other's columns null
        rows = rows.unionByName(found, allowMissingColumns=True)
        rival_aggs = [f"max({c}) AS {c}" for c in found.columns if c.startswith("c_")]  # one cleaned record a key
    # SQL text rather than Columns built in Python, each of which costs round trips to the JVM: the
    # versioned map took 722 of them and 0.63 s to build on the 20M-record bench table, now 236 and 0.36 s.
    run_sums = ["max(CASE WHEN in_run THEN o END) AS top_o", "count(CASE WHEN in_run THEN 1 END) AS n",
                "sum(CASE WHEN in_run AND NOT has_ver THEN 1 ELSE 0 END) AS anom"]
    version_type = in_run.schema["ver"].dataType.simpleString()
    packed = strategy.packed_rank_sql(bounds, version_type) if strategy.versioned and bounds else None
    if packed:
        rank = f"CASE WHEN in_run THEN {packed[0]} END"
        aggs = [f"max({rank}) AS packed", f"max_by(CAST(tomb AS INT), {rank}) AS winner_tomb", *run_sums,
                f"sum(CASE WHEN in_run AND NOT {packed[1]} THEN 1 ELSE 0 END) AS outside", *rival_aggs]
        best = f"({strategy.unpacked_rank_sql('packed', bounds, version_type)})"
    elif strategy.versioned:
        rank = f"CASE WHEN in_run THEN {strategy.winner_rank_sql()} END"
        aggs = [f"max({rank}) AS best", f"max_by(CAST(tomb AS INT), {rank}) AS winner_tomb", *run_sums,
                "0 AS outside", *rival_aggs]
        best = "best"
    else:  # the rank is the offset: plain long aggregates
        aggs = ["max_by(CAST(tomb AS INT), o) AS winner_tomb", *run_sums, "0 AS outside"]
    agg = rows.groupBy("p", "key").agg(*[F.expr(a) for a in aggs])
    clean_o, clean_expired = "CAST(NULL AS BIGINT)", "CAST(NULL AS BOOLEAN)"
    if found is not None:  # the whole rank is compared only where a cleaned record was found
        clean_wins = f"c_o IS NOT NULL AND {strategy.winner_rank_sql('c_has_ver', 'c_ver', 'c_o')} > {best}"
        clean_o, clean_expired = (f"CASE WHEN {clean_wins} THEN c_o END",
                                  f"CASE WHEN {clean_wins} THEN coalesce(c_expired, false) END")
    return agg.selectExpr("p", "key", "winner_tomb", "top_o", "n", "anom", "outside",
                          f"{best}.o AS winner_o" if strategy.versioned else "top_o AS winner_o",
                          f"{clean_o} AS clean_o", f"{clean_expired} AS clean_expired")


def _clean_rivals(in_run: DataFrame, strategy: Strategy, rivals: CleanRivals) -> DataFrame | None:
    """Per run key that may lose, its best cleaned record (c_has_ver, c_ver, c_o, c_expired; one row
    a key), or None where no run record can lose. The run records that may lose are broadcast to
    the scan of the clean part (a join on one 64-bit hash of partition and key, the fields compared
    besides), which streams at scan speed; the few matches are reduced to one per key (the
    clean-part invariant is one record per key, but nothing enforces it against appends below the
    checkpoint)."""
    late, clean = in_run, rivals.clean
    version_type = in_run.schema["ver"].dataType.simpleString()
    as_long = version_as_long_sql("ver", version_type)
    if rivals.ceiling is not None and as_long:
        late = late.where(f"NOT has_ver OR {as_long} <= {rivals.ceiling}")
    if rivals.floors is not None and as_long:
        if not rivals.floors:  # no partition holds a run record that may lose
            return None
        clean = clean.where(_above_floors_sql(rivals.floors, version_type))
    fields = [f"k{i}" for i in range(len(strategy.tc.key_columns))]
    late = late.selectExpr(f"{_key_hash_sql('p', fields)} AS h", "p", "key")
    clean = clean.selectExpr(f"{_key_hash_sql('p', fields)} AS h", "p", *[f"key.{f} AS {f}" for f in fields],
                             "has_ver", "ver", "o")
    rank = strategy.winner_rank_sql("c.has_ver", "c.ver", "c.o")
    best = (clean.alias("c").join(join_side(late, rivals.late_bound).alias("k"), F.expr(_same_key_sql(fields)))
            .groupBy("k.p", "k.key").agg(F.expr(f"max({rank}) AS c"))
            .selectExpr("p", "key", "c.has_ver AS c_has_ver", "c.ver AS c_ver", "c.o AS c_o"))
    if rivals.expired_clean is None:
        return best.selectExpr("*", "CAST(NULL AS BOOLEAN) AS c_expired")
    expired = rivals.expired_clean.selectExpr("p", "o AS c_o", "true AS c_expired")
    return best.join(expired, ["p", "c_o"], "left")


def key_map_sums(kmap: DataFrame, ref: TableRef, bounds: RankBounds | None = None) -> tuple[PartitionSums, ...]:
    """Per partition of a key map, its sums (phases.PartitionSums). Stops the run if a record lies
    outside the bounds its rank was packed with."""
    clean_wins = F.col("clean_o").isNotNull()
    expired_o = F.when(F.coalesce(F.col("clean_expired"), F.lit(False)), F.col("clean_o"))
    loses = (F.col("winner_o") != F.col("top_o")) | clean_wins
    rows = kmap.groupBy("p").agg(
        F.max("top_o").alias("end"), F.sum("n").alias("n"), F.count("*").alias("keys"),
        F.sum("anom").alias("anom"), F.sum(F.when(~clean_wins, F.col("winner_tomb"))).alias("new_tombstones"),
        F.count(expired_o).alias("expired"), F.max(expired_o).alias("expired_o"),
        F.sum("outside").alias("outside"), F.max_by(loses.cast("int"), "top_o").alias("end_loses")).collect()
    sums = tuple(PartitionSums(
        p=int(r["p"] or 0), end=int(r["end"] or 0), n=int(r["n"] or 0), keys=int(r["keys"] or 0),
        anom=int(r["anom"] or 0), new_tombstones=int(r["new_tombstones"] or 0), expired=int(r["expired"] or 0),
        expired_o=r["expired_o"], outside=int(r["outside"] or 0), end_loses=bool(r["end_loses"])) for r in rows)
    outside = sum(r.outside for r in sums)
    if outside:
        raise CompactionError(ref.short, f"{outside} record(s) of the run lie outside the offset and version bounds "
                                         f"Iceberg's metrics give for its data files ({bounds}): the metrics do not "
                                         f"describe the data; nothing committed")
    return sums


@dataclass(frozen=True)
class KeyMapSource:
    """The key map's MERGE source, its schema named once. Per row: the partition (``lc_p``, a
    partitioned table's only) and key fields (``lc_k{i}``) it matches, the offsets it deletes
    (``lc_from`` through ``lc_through``), the offset it keeps (``lc_keep``) and the log end it
    protects (``lc_protect``; both null: none), whether it is a keyless bad record (``lc_keyless``,
    matched at its offset), and one hash of partition and key (``lc_hash``, the MERGE's join key)."""
    partitioned: bool
    key_fields: int

    P, FROM, THROUGH, KEEP, PROTECT, KEYLESS, HASH = (
        "lc_p", "lc_from", "lc_through", "lc_keep", "lc_protect", "lc_keyless", "lc_hash")

    @classmethod
    def of(cls, tc: TableConfig) -> "KeyMapSource":
        return cls(tc.partition_column is not None, len(tc.key_columns))

    @staticmethod
    def key(i: int) -> str:
        return f"lc_k{i}"

    @property
    def identity(self) -> list[str]:
        """The columns a row matches a record's partition and key with."""
        return ([self.P] if self.partitioned else []) + [self.key(i) for i in range(self.key_fields)]

    def row(self, p: Column, key: list[Column], from_o: Column, through_o: Column, keep: Column,
            protect: Column, keyless: Column) -> list[Column]:
        """One source row's columns, in the schema's order (``p`` dropped for an unpartitioned table)."""
        return [*([p.alias(self.P)] if self.partitioned else []), *[c.alias(self.key(i)) for i, c in enumerate(key)],
                from_o.alias(self.FROM), through_o.alias(self.THROUGH), keep.alias(self.KEEP),
                protect.alias(self.PROTECT), keyless.alias(self.KEYLESS)]

    def hashed(self, source: DataFrame) -> DataFrame:
        """The source with lc_hash: a keyless record hashes with its offset too (see merge_on), a
        keyed one without it."""
        return source.withColumn(self.HASH, F.xxhash64(*[F.col(n) for n in self.identity],
                                                       F.when(F.col(self.KEYLESS), F.col(self.FROM))))

    def merge_on(self, tc: TableConfig) -> str:
        """The MERGE condition, the table as t and the source as s: the record's key is a source row's,
        its offset inside the row's [lc_from, lc_through], and it is neither the kept record nor a
        protected log end. One 64-bit hash of partition and key is the join key; the columns
        themselves are checked with >= and <= rather than '=' (Spark makes every '=' a hash key, and a
        join on one long probes far faster than on strings: 3.8 s against 5.5 s for 20M rows in
        benchmarks/). Bad records (rule 7) match by their exact identity, nulls equal to nulls: a
        keyless one's hash takes its offset in, so a partition's keyless records do not all share one
        hash bucket."""
        strategy = Strategy(tc)
        target_cols = ([tc.partition_column] if tc.partition_column else []) + list(tc.key_columns)
        t_o = f"t.{ident(tc.offset_column)}"
        hashed = [f"CAST(t.{ident(tc.partition_column)} AS BIGINT)"] if tc.partition_column else []
        hashed += [f"t.{ident(c)}" for c in tc.key_columns]  # the same values and types as the source's
        hashed.append(f"CASE WHEN {strategy.null_key_of('t.')} THEN CAST({t_o} AS BIGINT) END")

        def same(t: str, s: str, low: str | None = None) -> str:  # t = s (or inside [low, s]), null = null
            return f"({t} >= {low or s} AND {t} <= {s} OR {t} IS NULL AND {low or s} IS NULL)"

        return " AND ".join([f"xxhash64({', '.join(hashed)}) = s.{self.HASH}"]
                            + [same(f"t.{ident(c)}", f"s.{n}") for c, n in zip(target_cols, self.identity)]
                            + [same(t_o, f"s.{self.THROUGH}", f"s.{self.FROM}"),
                               f"coalesce({t_o} <> s.{self.KEEP}, TRUE) AND coalesce({t_o} <> s.{self.PROTECT}, TRUE)"])


@dataclass(frozen=True)
class KeyDecision:
    """A key map with each key's final decision (``decided``: p, key, top_o, and the offset it
    keeps, ``keep``, null: none, its winner is a clean tombstone past its horizon; ``protect``, the
    log end it must keep though it loses, rule 6), and the figures the run reports."""
    decided: DataFrame
    new_tombstones: int
    expired: int
    expired_by_partition: Offsets
    retained: Offsets


def decide_keys(ctx: RunContext, kmap: KeyMap) -> KeyDecision:
    """The keep rule per key, from the map alone: the run's best, unless the cleaned record the map
    found beats it (a late lower version loses to its cleaned winner, which stays, or goes if it is
    a tombstone past its horizon). Under the offset strategy a run's record always beats the
    cleaned ones."""
    none = F.lit(None).cast("bigint")
    sums, frame = kmap.sums, kmap.frame
    new_tombstones = sum(r.new_tombstones for r in sums)
    if not ctx.fr.strategy.versioned:
        decided = frame.select("p", "key", "top_o", F.col("winner_o").alias("keep"), none.alias("protect"))
        return KeyDecision(decided=decided, new_tombstones=new_tombstones, expired=0, expired_by_partition={},
                           retained={})
    goes_expired = F.coalesce(F.col("clean_expired"), F.lit(False))
    keep = F.when(goes_expired, none).when(F.col("clean_o").isNotNull(), F.col("clean_o")).otherwise(F.col("winner_o"))
    # Rule 6: a partition's log end stays though it loses (a higher version earlier in the log, or
    # its cleaned record); it is then kept and recorded as retained. The run is a prefix, so the log
    # end is a top_o.
    protect = F.when(F.lit(ctx.tc.retain_log_end_record) & at_log_ends(F.col("p"), F.col("top_o"), ctx.log_end),
                     F.col("top_o"))
    decided = frame.select("p", "key", "top_o", keep.alias("keep"), protect.alias("protect"))
    return KeyDecision(decided=decided, new_tombstones=new_tombstones, expired=sum(r.expired for r in sums),
                       expired_by_partition={r.p: r.expired_o for r in sums if r.expired_o is not None},
                       retained=_log_ends_lost_in_run(ctx, sums))


def _log_ends_lost_in_run(ctx: RunContext, sums: tuple[PartitionSums, ...]) -> Offsets:
    """Rule 6: a partition's log end is retained when its key keeps another record (a higher
    version at a lower offset, or its cleaned record). Only the key of the run's last offset in a
    partition can hold the log end, and only where that offset is it."""
    if not ctx.tc.retain_log_end_record:
        return {}
    return {r.p: r.end for r in sums if r.end_loses and ctx.log_end.get(r.p) == r.end}


def _key_hash_sql(p: str, fields: list[str]) -> str:
    """One 64-bit hash of a record's partition and key, the clean lookup's join key: Spark probes a
    join on one long far faster than on a struct of strings, which it copies into a row per record
    (for 19M clean records, 3.7 s against 4.6 s in benchmarks/). The key's fields are compared
    besides (_same_key_sql), so a collision cannot match."""
    return f"xxhash64({', '.join([p, *[f'key.{f}' for f in fields]])})"


def _same_key_sql(fields: list[str]) -> str:
    """The clean lookup's join condition: the hashes equal, then the partition and each key field,
    as >= and <= (an '=' would become a hash key of its own). A clean record's key has no null field
    (a record with one goes to quarantine, rule 7), and nor has a run key's."""
    pairs = [("c.p", "k.p"), *[(f"c.{f}", f"k.key.{f}") for f in fields]]
    return " AND ".join(["c.h = k.h", *[f"{c} >= {k} AND {c} <= {k}" for c, k in pairs]])


def _above_floors_sql(floors: Mapping[EnginePartition, int | None], version_type: str) -> str:
    """Clean records of a partition that may hold a late record, at or above its floor, on the
    version column as it is (ver) so that the filter reaches Iceberg."""
    bounded = {p: long_as_version_sql(v, version_type) for p, v in floors.items() if v is not None}
    terms = [checkpoint_sql("p", "ver", bounded, ">=")] if bounded else []
    terms += [f"p = {p}" for p, v in floors.items() if v is None]
    return " OR ".join(t for t in terms if t)


def build_key_map(ctx: RunContext) -> KeyMap:
    """The run's key map, built from its range (engine._run_range builds it from the whole dirty
    part when that is the run), held for the figures and the MERGE."""
    rivals = replace(ctx.part.rivals, late_bound=ctx.run.n_run) if ctx.part.rivals else None
    frame = ctx.hold(key_map(ctx.run.in_run, ctx.fr.strategy, ctx.start.rank_bounds, rivals))
    return KeyMap(frame, key_map_sums(frame, ctx.ref, ctx.start.rank_bounds))


def key_map_plan(ctx: RunContext, prebuilt: KeyMap | None = None, bad_rows: DataFrame | None = None,
                 n_bad: int = 0) -> "KeyMapPlan":
    """Kafka's cleaner, for every strategy: a map of the run's keys to the offset each keeps, then
    one MERGE deleting every other record of the key up to its highest offset in the run, cleaned or
    dirty, reading the table once. No record of the run's range is above that offset (the run is a
    prefix of each partition), so nothing past the run is touched. Expired tombstones whose key has
    no record in the run join the map alone (from = through = their offset, nothing kept), and so do
    ``bad_rows``, the ``n_bad`` bad records that go to quarantine (rule 7), by their exact identity.
    ``prebuilt``: the map phase 1 built from the whole dirty part (RunRange.key_map), else built
    here from the run's range."""
    tc, fr, schema = ctx.tc, ctx.fr, KeyMapSource.of(ctx.tc)
    kmap = prebuilt or build_key_map(ctx)
    keys = decide_keys(ctx, kmap)
    none, keyed = F.lit(None).cast("bigint"), F.lit(False)
    run_key = [F.col("key").getField(f"k{i}") for i in range(len(tc.key_columns))]  # p: the partition as bigint
    source = keys.decided.select(*schema.row(F.col("p"), run_key, F.lit(LONG_MIN), F.col("top_o"), F.col("keep"),
                                             F.col("protect"), keyed))
    expiry = _expiry_only(ctx, kmap.frame)
    if expiry.going is not None:
        o = F.col("o")
        source = source.unionByName(expiry.going.select(*schema.row(F.col("p"), run_key, o, o, none, none, keyed)))
    if n_bad:
        source = source.unionByName(bad_rows.select(*schema.row(
            fr.p, fr.k_raw, fr.o, fr.o, none, none, F.expr(fr.strategy.null_key_sql))))
    expired_by_partition = dict(keys.expired_by_partition)
    for p, o in expiry.expired_by_partition.items():
        expired_by_partition[p] = max(o, expired_by_partition.get(p, o))
    expired = keys.expired + expiry.expired
    n_source = ctx.run.n_run + expired + n_bad
    return KeyMapPlan(expired=expired, expired_by_partition=expired_by_partition, new_tombstones=keys.new_tombstones,
                      new_retained=keys.retained, ctx=ctx, source=join_side(schema.hashed(source), n_source),
                      on=schema.merge_on(tc), n_source=n_source, keys=sum(r.keys for r in kmap.sums),
                      expiry_read=expiry.read, n_bad=n_bad)


@dataclass(frozen=True)
class _ExpiryOnly:
    """Clean tombstones past their horizon whose key has no record in the run: each goes alone,
    unless it is its partition's log end (rule 6)."""
    going: DataFrame | None  # (p, key, o) of those that go
    read: int
    expired: int
    expired_by_partition: Offsets


def _expiry_only(ctx: RunContext, kmap: DataFrame) -> _ExpiryOnly:
    if ctx.part.expired_clean is None:
        return _ExpiryOnly(None, 0, 0, {})
    expiry_only = ctx.hold(ctx.part.expired_clean.join(kmap.select("p", "key"), ["p", "key"], "left_anti")
                           .join(ctx.log_end_df, "p", "left").select("p", "key", "o", (~ctx.protected).alias("goes")))
    rows = expiry_only.groupBy("p").agg(F.count("*").alias("read"), F.sum(F.col("goes").cast("int")).alias("n"),
                                        F.max(F.when(F.col("goes"), F.col("o"))).alias("o")).collect()
    return _ExpiryOnly(expiry_only.where("goes").select("p", "key", "o"), sum(int(r["read"]) for r in rows),
                       sum(int(r["n"] or 0) for r in rows), {r["p"]: r["o"] for r in rows if r["o"] is not None})


@dataclass(frozen=True)
class KeyMapPlan(Plan):
    """The key map's decision: one MERGE source row per run key (and per expired tombstone alone)."""
    ctx: RunContext
    source: DataFrame  # KeyMapSource's rows
    on: str
    n_source: int
    keys: int  # the run's keys
    expiry_read: int
    n_bad: int  # bad records the MERGE removes (to quarantine)

    def commit(self, run_id: str) -> bool:
        if not self.n_source:
            return False
        merge_delete(self.ctx.spark, self.ctx.ref, self.source, self.on, alias="s",
                     name=f"lakecleaner_removals_{run_id}")
        return True

    def figures(self, summary: Mapping[str, str] | None) -> tuple[int, int]:
        ctx = self.ctx
        if summary is None:  # dry run: count what the MERGE would match, at the pinned snapshot
            view = temp_view(self.source, "lakecleaner_key_map")
            matched = ctx.spark.sql(f"SELECT count(*) FROM {ctx.ref.sql()} VERSION AS OF {ctx.start.snapshot} t "
                                    f"JOIN {view} s ON {self.on}").collect()[0][0]
            ctx.spark.catalog.dropTempView(view)
        else:
            # net of delete files the commit replaced: Iceberg folds a data file's earlier
            # position deletes into the new delete file (and reports those as removed)
            matched = int(summary.get("added-position-deletes", 0)) - int(summary.get("removed-position-deletes", 0))
        superseded = max(matched - self.expired - self.n_bad, 0)
        # Every record of a run key up to its top offset was examined, and it either went as
        # superseded, or is the key's winner (kept, or gone as an expired tombstone), or is a log
        # end kept though it loses; tombstones that expire alone were read besides.
        return superseded, superseded + self.keys + len(self.new_retained) + self.expiry_read

    @property
    def deletes_by_key_through(self) -> Offsets:
        """Every record of a run key up to its top offset: the run's ends."""
        return self.ctx.ends
