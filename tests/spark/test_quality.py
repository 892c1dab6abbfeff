"""Each expectation fails on a table built to break exactly its rule, and passes after a correct
compaction."""
import hashlib
import json
import time

import pytest

from lakecleaner.spark.catalog import load_table_config
from lakecleaner.core.config import CHECKPOINT_PROPERTY
from lakecleaner.spark.engine import compact_table
from lakecleaner.spark.quality import QualityError, validate_table
from lakecleaner.core.quality_results import list_results
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.strategies import encode_version_header
from lakecleaner_dev.tables import append, create_compacted_table

pytestmark = pytest.mark.spark


def _rows(start, n, keys=3, **extra):
    return [{"key": f"k{i % keys}", "offset": i, "partition": 0, "value": f"v{i}", **extra} for i in range(start, start + n)]


def _set_checkpoint(spark, ref, ckpt):
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('{CHECKPOINT_PROPERTY}' = '{ckpt.to_json()}')")


def _unkeyed(key: str) -> str:
    """How a deployment with no key-hash secret names a one-column key (lakecleaner.core.keyhash)."""
    return hashlib.sha256(json.dumps([key]).encode()).hexdigest()


def _failed_rules(summary):
    return {r["rule"] for r in summary["rules"] if not r["success"]}


@pytest.mark.parametrize("format_version", [2, 3])
def test_a_correctly_compacted_table_passes_every_rule(spark, lake_config, table_name, format_version):
    """On v3 as on v2: the suite reads the table through its deletion vectors."""
    ref = create_compacted_table(spark, lake_config, table_name, {"delete.retention.ms": "0"},
                                 format_version=format_version)
    append(spark, ref, _rows(0, 30) + [{"key": "gone", "offset": 30, "partition": 0, "value": None}])
    compact_table(spark, lake_config, table_name)
    append(spark, ref, _rows(31, 3))
    compact_table(spark, lake_config, table_name)  # the tombstone expired and went
    summary = validate_table(spark, lake_config, table_name, interval_ms=0)
    assert summary["success"] and not _failed_rules(summary), summary
    assert {r["rule"] for r in summary["rules"]} >= {"tombstone expiry (delete.retention.ms)", "one record per key",
                                                     "tombstone expiry: none removed early (delete.retention.ms)",
                                                     "the winner is right (offset strategy)"}
    assert list_results(lake_config, ref.short)[0]["run_name"] == summary["run_name"]


def test_tombstone_kept_past_its_horizon_fails_tombstone_expiry(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name, {"delete.retention.ms": "1000"})
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": None},
                        {"key": "b", "offset": 1, "partition": 0, "value": "x"}])
    now = int(time.time() * 1000)
    _set_checkpoint(spark, ref, Checkpoint().advanced(now - 10_000, {0: 1}, {}, 1000, 1))  # cleaned 10 s ago
    with pytest.raises(QualityError, match=rf"table {table_name}: data-quality rule failed: tombstone expiry.*"
                                           rf"'key_hash': '{_unkeyed('a')}'"):  # named by hash, never the key
        validate_table(spark, lake_config, table_name, now_ms=now, interval_ms=0)
    # within one schedule interval the tombstone is allowed to be still there
    ok = validate_table(spark, lake_config, table_name, now_ms=now, interval_ms=60_000)
    assert "tombstone expiry (delete.retention.ms)" not in _failed_rules(ok)


def test_a_tombstone_put_back_after_the_run_that_removed_it_fails_tombstone_expiry(spark, lake_config, table_name):
    """The checkpoint real runs write, checked as the DAG checks it (right after the run, one
    schedule interval given): the run that removed the expired tombstone folded its history entry,
    and the check must still see that entry's horizon, or it never checks anything."""
    ref = create_compacted_table(spark, lake_config, table_name, {"delete.retention.ms": "1000"})
    tombstone = {"key": "a", "offset": 0, "partition": 0, "value": None}
    append(spark, ref, [tombstone, {"key": "b", "offset": 1, "partition": 0, "value": "x"}])
    compact_table(spark, lake_config, table_name)  # cleans the tombstone first: its horizon starts
    time.sleep(1.1)
    append(spark, ref, [{"key": "c", "offset": 2, "partition": 0, "value": "y"}])
    now = int(time.time() * 1000)
    compact_table(spark, lake_config, table_name, now_ms=now)  # the tombstone expired: removed
    ok = validate_table(spark, lake_config, table_name, now_ms=now, interval_ms=15 * 60_000)
    assert "tombstone expiry (delete.retention.ms)" in {r["rule"] for r in ok["rules"]} and ok["success"], ok
    append(spark, ref, [tombstone])  # what a cleaner that failed to remove it would have left
    summary = validate_table(spark, lake_config, table_name, now_ms=now, interval_ms=15 * 60_000,
                             raise_on_failure=False)
    assert "tombstone expiry (delete.retention.ms)" in _failed_rules(summary), summary


def test_duplicate_keys_in_the_cleaned_part_fail_one_record_per_key(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 6, keys=2) + _rows(6, 1, keys=100))
    _set_checkpoint(spark, ref, Checkpoint(offsets={0: 6}))  # claims cleaned, but never was
    summary = validate_table(spark, lake_config, table_name, raise_on_failure=False)
    assert {"one record per key", "the winner is right (offset strategy)"} <= _failed_rules(summary)
    offenders = next(r for r in summary["rules"] if r["rule"] == "one record per key")["offending"]
    assert {o["key_hash"] for o in offenders} == {_unkeyed("k0"), _unkeyed("k1")}


def test_wrong_winner_under_the_header_strategy_fails(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name, {"compaction.strategy": "header",
                                                                  "compaction.strategy.header": "v"})
    h = lambda v: [{"key": "v", "value": encode_version_header(v)}]  # noqa: E731
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "new", "headers": h(9)},
                        {"key": "a", "offset": 1, "partition": 0, "value": "stale", "headers": h(1)},
                        {"key": "z", "offset": 2, "partition": 0, "value": "end", "headers": h(1)}])
    _set_checkpoint(spark, ref, Checkpoint(offsets={0: 2}))
    summary = validate_table(spark, lake_config, table_name, raise_on_failure=False)
    winner = next(r for r in summary["rules"] if r["rule"] == "the winner is right (header strategy)")
    assert not winner["success"] and winner["offending"][0]["offset_id"] == 1
    spark.sql(f"ALTER TABLE {ref.sql()} UNSET TBLPROPERTIES ('{CHECKPOINT_PROPERTY}')")  # drop the false claim
    compact_table(spark, lake_config, table_name)
    assert validate_table(spark, lake_config, table_name)["success"]


def test_a_header_name_with_quote_backslash_and_dollar_reaches_the_table_the_run_and_the_suite(spark, lake_config,
                                                                                            table_name):
    """Property values are SQL string literals at every step: the table's creation, the run's
    header lookup and the quality suite's, so a name like this one is a name, not broken SQL nor
    a variable Spark substitutes (${v} would read as '')."""
    name = "producer's \\ ${v}"
    ref = create_compacted_table(spark, lake_config, table_name, {"compaction.strategy": "header",
                                                                  "compaction.strategy.header": name})
    assert load_table_config(spark, lake_config, ref)[0].version_header == name
    h = lambda v: [{"key": name, "value": encode_version_header(v)}, {"key": "v", "value": encode_version_header(-v)}]  # noqa: E731
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "new", "headers": h(9)},
                        {"key": "a", "offset": 1, "partition": 0, "value": "stale", "headers": h(1)},
                        {"key": "z", "offset": 2, "partition": 0, "value": "end", "headers": h(1)}])
    compact_table(spark, lake_config, table_name)
    assert sorted(r["offset"] for r in spark.table(ref.sql()).collect()) == [0, 2]
    assert validate_table(spark, lake_config, table_name)["success"]


def test_null_keys_duplicate_offsets_and_anomalies_fail_their_rules(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name, {"compaction.strategy": "header",
                                                                  "compaction.strategy.header": "v"})
    append(spark, ref, [{"key": None, "offset": 0, "partition": 0, "value": "x"},
                        {"key": "a", "offset": 1, "partition": 0, "value": "x"},
                        {"key": "b", "offset": 1, "partition": 0, "value": "y"}])
    _set_checkpoint(spark, ref, Checkpoint(offsets={0: 1}))  # a run that claims it cleaned them
    summary = validate_table(spark, lake_config, table_name, raise_on_failure=False)
    failed = _failed_rules(summary)
    assert {"no null keys outside quarantine", "offsets unique per partition"} <= failed
    anomalies = next(r for r in summary["rules"] if r["rule"] == "anomalous versions below threshold")
    assert not anomalies["success"] and anomalies["severity"] == "fail"


def test_a_keyless_record_appended_since_the_run_is_not_a_failure(spark, lake_config, table_name):
    """Ingest goes on while the cleaner runs: a keyless record appended after the compaction is dirty,
    the next run's to quarantine; the rule judges only the cleaned part."""
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 6) + [{"key": None, "offset": 6, "partition": 0, "value": "x"}])
    compact_table(spark, lake_config, table_name)
    append(spark, ref, [{"key": None, "offset": 7, "partition": 0, "value": "y"}, *_rows(8, 2)])
    summary = validate_table(spark, lake_config, table_name, raise_on_failure=False)
    assert "no null keys outside quarantine" not in _failed_rules(summary), summary


def test_a_keyless_log_end_passes_the_null_key_rule_and_any_other_keyless_record_fails_it(spark, lake_config,
                                                                                           table_name):
    """Rule 6 keeps a partition's log end even when it is keyless (copied to quarantine as well); any
    other keyless record in the cleaned part is one a run failed to move."""
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 3) + [{"key": None, "offset": 3, "partition": 0, "value": "x"}])
    _set_checkpoint(spark, ref, Checkpoint(offsets={0: 3}))
    summary = validate_table(spark, lake_config, table_name, raise_on_failure=False)
    assert "no null keys outside quarantine" not in _failed_rules(summary), summary
    append(spark, ref, [{"key": None, "offset": 0, "partition": 1, "value": "x"},
                        {"key": "k1", "offset": 1, "partition": 1, "value": "y"}])
    _set_checkpoint(spark, ref, Checkpoint(offsets={0: 3, 1: 1}))
    summary = validate_table(spark, lake_config, table_name, raise_on_failure=False)
    rule = next(r for r in summary["rules"] if r["rule"] == "no null keys outside quarantine")
    assert not rule["success"] and rule["offending"] == [{"partition_id": 1, "offset_id": 0}], rule


def test_freshness_fails_when_dirty_data_is_past_max_lag(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "1"})
    append(spark, ref, _rows(0, 3))
    with pytest.raises(QualityError, match="freshness"):
        validate_table(spark, lake_config, table_name, now_ms=int(time.time() * 1000) + 60_000)
    compact_table(spark, lake_config, table_name)
    assert validate_table(spark, lake_config, table_name)["success"]


def test_tombstone_removed_before_its_retention_fails_tombstone_expiry(spark, lake_config, table_name, monkeypatch):
    """A cleaner whose horizon is one millisecond early removes a tombstone at first clean +
    delete.retention.ms - 1; the run history gives it away. Removed at exactly first clean +
    delete.retention.ms (Kafka's deleteHorizonMs, KIP-534) is on time."""
    ref = create_compacted_table(spark, lake_config, table_name, {"delete.retention.ms": "60000"})
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": None},
                        {"key": "b", "offset": 1, "partition": 0, "value": "x"}])
    # the tombstone's first cleaning, dated by its commit (the run's now lags behind it)
    first = compact_table(spark, lake_config, table_name, now_ms=int(time.time() * 1000))["cleaned_at_ms"]
    assert validate_table(spark, lake_config, table_name, now_ms=first, interval_ms=0)["success"]

    honest = Checkpoint.expired_through
    monkeypatch.setattr(Checkpoint, "expired_through",
                        lambda self, p, now, retention: honest(self, p, now, retention - 1))
    stats = compact_table(spark, lake_config, table_name, now_ms=first + 59_999)
    assert stats["removed_expired_tombstones"] == 1 and stats["expired_tombstone_latest_cleaned_ms"] == first
    with pytest.raises(QualityError, match=rf"table {table_name}: data-quality rule failed: tombstone expiry: none "
                                           rf"removed early.*'run_id': '{stats['run_id']}'.*'first_cleaned_ms': {first}"):
        validate_table(spark, lake_config, table_name, now_ms=first + 59_999, interval_ms=0)

    # A correct cleaner: a tombstone removed once its retention has passed, at exactly the horizon
    # (the early run was judged once).
    monkeypatch.setattr(Checkpoint, "expired_through", honest)
    append(spark, ref, [{"key": "c", "offset": 2, "partition": 0, "value": None},
                        {"key": "d", "offset": 3, "partition": 0, "value": "x"}])
    later = compact_table(spark, lake_config, table_name, now_ms=first + 59_999)["cleaned_at_ms"]
    stats = compact_table(spark, lake_config, table_name, now_ms=later + 60_000)
    assert stats["removed_expired_tombstones"] == 1 and stats["expired_tombstone_latest_cleaned_ms"] == later
    summary = validate_table(spark, lake_config, table_name, now_ms=later + 60_000, interval_ms=0)
    assert summary["success"], summary
    assert next(r for r in summary["rules"] if r["rule"].startswith("tombstone expiry: none removed early"))["success"]


def test_a_warn_rule_is_gx_severity_warning_and_does_not_fail_the_validation(spark, lake_config, table_name):
    """quality.severity is great-expectations' own expectation ``severity`` (warn -> warning, fail ->
    critical), not a ``meta`` convention, and is read back from GX's result."""
    import dataclasses

    from lakecleaner.spark.quality import QualitySuites

    FRESHNESS = "freshness (max.compaction.lag.ms)"
    cfg = dataclasses.replace(lake_config, quality=dataclasses.replace(lake_config.quality,
                                                                       severity={FRESHNESS: "warn"}))
    ref = create_compacted_table(spark, cfg, table_name, {"max.compaction.lag.ms": "1"})
    append(spark, ref, _rows(0, 3))
    with QualitySuites(cfg) as suites:  # the context lives in the application's scratch space until closed
        summary = suites.validate(spark, table_name, now_ms=int(time.time() * 1000) + 60_000)  # no QualityError
        suite = suites.ctx.suites.get(ref.short)
    fresh = next(r for r in summary["rules"] if r["rule"] == FRESHNESS)
    assert summary["success"] and summary["warnings"] == 1 and not fresh["success"] and fresh["severity"] == "warn"
    assert {r["severity"] for r in summary["rules"] if r["rule"] != FRESHNESS} == {"fail"}
    levels = {e.meta["rule"]: (e.severity.value, tuple(e.meta)) for e in suite.expectations}
    assert levels[FRESHNESS] == ("warning", ("rule",))
    assert {v for k, v in levels.items() if k != FRESHNESS} == {("critical", ("rule",))}


def test_results_go_to_their_table_and_data_docs_to_the_state_root_whatever_it_is(spark, lake_config, table_name,
                                                                                  tmp_path, monkeypatch):
    """The state root on a store reached only through FileIO (tests/memory_fileio.py stands for an
    object store: no local path, no listing): the validation runs, its result is a row of the
    quality_results table read back through pyiceberg, its Data Docs pages are copied under the
    state root from the application's scratch space, and the scratch space is gone afterwards."""
    import dataclasses
    import os
    import tempfile

    from memory_fileio import STORE

    STORE.clear()
    scratch = tmp_path / "driver-tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    cfg = dataclasses.replace(
        lake_config, catalog=dataclasses.replace(lake_config.catalog, pyiceberg_properties={
            "py-io-impl": "memory_fileio.MemoryFileIO"}),
        cleaner=dataclasses.replace(lake_config.cleaner, state_location="mem://bucket/lake/_lakecleaner"))
    ref = create_compacted_table(spark, cfg, table_name)
    append(spark, ref, _rows(0, 6))
    compact_table(spark, cfg, table_name)
    summary = validate_table(spark, cfg, table_name, run_name="on-the-store", interval_ms=0)
    assert summary["success"], summary
    from lakecleaner.core.quality_results import read_docs_file

    (kept,) = list_results(cfg, ref.short)
    assert {k: kept[k] for k in ("run_name", "now_ms", "success", "rules", "docs_page")} == {
        k: summary[k] for k in ("run_name", "now_ms", "success", "rules", "docs_page")}
    ns, name = ref.short.split(".")
    assert kept["docs_page"].startswith(f"validations/{ns}/{name}/on-the-store/")
    assert kept["docs"] == f"mem://bucket/lake/_lakecleaner/quality/docs/{kept['docs_page']}"
    page = read_docs_file(cfg, kept["docs_page"])
    assert page and b"Great Expectations" in page
    published = {k.removeprefix("mem://bucket/lake/_lakecleaner/quality/docs/") for k in STORE if "/quality/docs/" in k}
    assert kept["docs_page"] in published and f"expectations/{ns}/{name}.html" in published
    assert "index.html" not in published and any(p.startswith("static/") for p in published)
    assert os.listdir(scratch) == []  # the GX context and its site went with the application's scratch space
    assert not (tmp_path / "wh").exists()


def test_a_validation_answers_for_the_runs_since_the_previous_one_kept_or_not_yet_kept(spark, lake_config,
                                                                                       table_name):
    """The previous validation of a table is read from the results table once per application, and
    one this application made (its results are appended when it closes) counts too."""
    from lakecleaner.spark.quality import QualitySuites

    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 6))
    compact_table(spark, lake_config, table_name)
    now = int(time.time() * 1000)
    validate_table(spark, lake_config, table_name, now_ms=now - 2000, run_name="kept", interval_ms=0)
    with QualitySuites(lake_config) as suites:
        assert suites._previous(spark, ref.short, now) == now - 2000  # from the table
        suites.validate(spark, table_name, now_ms=now - 1000, run_name="pending", interval_ms=0)
        assert suites._previous(spark, ref.short, now) == now - 1000  # this application's, not kept yet
        assert suites._previous(spark, ref.short, now - 1000) == now - 2000
        assert [r["run_name"] for r in list_results(lake_config, ref.short)] == ["kept"]
    assert [r["run_name"] for r in list_results(lake_config, ref.short)] == ["pending", "kept"]


def test_another_tables_run_recorded_mid_validation_leaves_the_validations_cached_batches_alone(
        spark, lake_config, table_name, monkeypatch):
    """In one application other tables' runs append to the run history while a table is validated.
    Spark recaches every cached frame that reads a table it writes to, so a batch of runs read from the
    history table was recached under GX's feet; racing the validation's own unpersist, a recache put
    the cached batch back after it, for good (CI caught one in test_batch's count of cached frames).
    Here another table's run is appended between GX's validation and the unpersist: the batch GX
    cached must stay as it was."""
    from pyspark.sql import functions as F

    from lakecleaner.spark import quality

    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 6))
    compact_table(spark, lake_config, table_name)
    history = lake_config.history_table

    def cached() -> int:
        return spark.sparkContext._jsc.getPersistentRDDs().size()

    run_suite, seen = quality._run_suite, []

    def suite_then_another_tables_run(ctx, source, name, rules, df, *rest):
        outcome = run_suite(ctx, source, name, rules, df, *rest)
        if name.endswith(".run_history"):  # GX has validated (and cached) the batch of runs
            before = cached()
            spark.table(history).where(F.col("table_name") == ref.short).withColumn(  # another table's run
                "table_name", F.lit(f"{ref.short}_other")).writeTo(history).append()
            seen.append((before, cached()))
        return outcome

    monkeypatch.setattr(quality, "_run_suite", suite_then_another_tables_run)
    before = cached()
    assert validate_table(spark, lake_config, table_name)["success"]
    assert len(seen) == 1 and seen[0][0] == seen[0][1]
    assert cached() == before
