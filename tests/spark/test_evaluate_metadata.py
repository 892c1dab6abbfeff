"""Evaluation on real Iceberg tables, read by pyiceberg from metadata only."""
import shutil
import time
from pathlib import Path

import pytest

from lakecleaner.config import LakecleanerConfig
from lakecleaner.engine import compact_table
from lakecleaner.scheduler import evaluate_all, record_outcome
from lakecleaner.state import StateStore
from lakecleaner.tables import append, create_compacted_table

pytestmark = pytest.mark.spark


def _rows(start, n, keys=4):
    return [{"key": f"k{i % keys}", "offset": i, "partition": 0, "value": f"v{i}"} for i in range(start, start + n)]


def test_evaluate_reads_metadata_only_and_tracks_the_cleaner(spark, lake_config, tmp_path):
    ns = f"ev{int(time.time() * 1000) % 10**8}"
    dirty = create_compacted_table(spark, lake_config, f"{ns}.dirty")
    append(spark, dirty, _rows(0, 40))
    cleaned = create_compacted_table(spark, lake_config, f"{ns}.cleaned", {"min.cleanable.dirty.ratio": "0.9"})
    append(spark, cleaned, _rows(0, 40))
    compact_table(spark, lake_config, f"{ns}.cleaned")
    append(spark, cleaned, _rows(40, 2))
    broken = create_compacted_table(spark, lake_config, f"{ns}.broken", {"compaction.strategy": "bogus"})
    append(spark, broken, _rows(0, 4))
    plain = create_compacted_table(spark, lake_config, f"{ns}.plain")
    spark.sql(f"ALTER TABLE {plain.sql()} SET TBLPROPERTIES ('cleanup.policy' = 'delete')")
    cfg = LakecleanerConfig(catalog=lake_config.catalog,
                            cleaner=type(lake_config.cleaner)(namespaces=(ns,), uncleanable_after_failures=2))
    now = int(time.time() * 1000) + 1
    evs = {e.table: e for e in evaluate_all(cfg, now_ms=now)}
    assert set(evs) == {f"{ns}.dirty", f"{ns}.cleaned", f"{ns}.broken"}  # not the delete-policy table
    assert evs[f"{ns}.dirty"].eligible and evs[f"{ns}.dirty"].dirty_ratio == 1.0
    c = evs[f"{ns}.cleaned"]
    assert not c.eligible and 0 < c.dirty_ratio < 0.9 and c.clean_bytes > 0
    assert evs[f"{ns}.broken"].status == "invalid config" and "compaction.strategy='bogus'" in evs[f"{ns}.broken"].reason

    # metadata only: with every data file gone from disk the figures are the same
    data_dirs = [Path(lake_config.catalog.warehouse) / ns / t / "data" for t in ("dirty", "cleaned")]
    for d in data_dirs:
        shutil.rmtree(d)
    again = {e.table: e for e in evaluate_all(cfg, now_ms=now)}
    assert again[f"{ns}.cleaned"].as_dict() == c.as_dict()
    assert again[f"{ns}.dirty"].as_dict() == evs[f"{ns}.dirty"].as_dict()

    # consecutive failures mark a table uncleanable; an operator clears it
    record_outcome(cfg, f"{ns}.dirty", ok=False, error="boom 1")
    assert evaluate_all(cfg, [f"{ns}.dirty"], now)[0].eligible
    record_outcome(cfg, f"{ns}.dirty", ok=False, error="boom 2")
    marked = evaluate_all(cfg, [f"{ns}.dirty"], now)[0]
    assert marked.status == "uncleanable" and "boom 2" in marked.reason
    StateStore(cfg).clear(f"{ns}.dirty")
    assert evaluate_all(cfg, [f"{ns}.dirty"], now)[0].eligible


def test_unreadable_table_gets_a_row_and_the_others_are_evaluated(spark, lake_config):
    ns = f"ur{int(time.time() * 1000) % 10**8}"
    good = create_compacted_table(spark, lake_config, f"{ns}.good")
    append(spark, good, _rows(0, 4))
    bad = create_compacted_table(spark, lake_config, f"{ns}.bad")
    append(spark, bad, _rows(0, 4))
    meta_dir = Path(lake_config.catalog.warehouse) / ns / "bad" / "metadata"
    version = (meta_dir / "version-hint.text").read_text().strip()
    (meta_dir / f"v{version}.metadata.json").write_text("{ not json")
    cfg = LakecleanerConfig(catalog=lake_config.catalog, cleaner=type(lake_config.cleaner)(namespaces=(ns,)))
    evs = {e.table: e for e in evaluate_all(cfg)}
    assert evs[f"{ns}.bad"].status == "unreadable" and evs[f"{ns}.bad"].reason.startswith(f"table {ns}.bad: ")
    assert evs[f"{ns}.good"].eligible
