"""Evaluation on real Iceberg tables, read by pyiceberg from metadata only."""
import shutil
import time
from pathlib import Path

import pytest

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.spark.engine import compact_table
from lakecleaner.core.scheduler import evaluate_all, plan_run, record_outcome, summarize
from lakecleaner.core.state import StateStore, document_name, read_document
from lakecleaner_dev.tables import append, create_compacted_table

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
    record_outcome(cfg, f"{ns}.dirty", ok=False, error="boom 1", now_ms=now)
    assert evaluate_all(cfg, [f"{ns}.dirty"], now)[0].eligible
    record_outcome(cfg, f"{ns}.dirty", ok=False, error="boom 2", now_ms=now)
    marked = evaluate_all(cfg, [f"{ns}.dirty"], now)[0]
    assert marked.status == "uncleanable" and "boom 2" in marked.reason
    StateStore(cfg).clear(f"{ns}.dirty")
    assert evaluate_all(cfg, [f"{ns}.dirty"], now)[0].eligible

    # a half-written state document: that table's row says so (its mark is unknown), the others go on
    state_doc = Path(cfg.state_root.removeprefix("file:")) / "state" / f"{ns}.dirty.json"
    state_doc.write_text("")
    rows = {e.table: e for e in evaluate_all(cfg, now_ms=now)}
    assert rows[f"{ns}.dirty"].status == "unreadable"
    assert rows[f"{ns}.dirty"].reason.startswith(f"table {ns}.dirty: cleaner state ")
    assert rows[f"{ns}.cleaned"].as_dict() == c.as_dict()


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


def test_a_bad_name_or_a_non_integral_offset_column_is_named_and_no_value_shown(spark, lake_config, tmp_path):
    """A name no table can have is the parser's error, and is never made into a path (an absolute
    one was read outside the warehouse); catalog.namespace.table is accepted as elsewhere. An offset
    column of another type is the setting's error, not a record's bound failing int()."""
    ns = f"bn{int(time.time() * 1000) % 10**8}"
    good = create_compacted_table(spark, lake_config, f"{ns}.good")
    append(spark, good, _rows(0, 4))
    stringly = create_compacted_table(spark, lake_config, f"{ns}.stringly", {"compaction.offset.column": "value"})
    append(spark, stringly, [{**r, "value": f"secret-{i}"} for i, r in enumerate(_rows(0, 4))])
    outside = tmp_path / f"{ns}" / "good"
    shutil.copytree(Path(lake_config.catalog.warehouse) / ns / "good", outside)
    asked = ["no_namespace", f"{tmp_path}/{ns}.good", f"other.{ns}.good", f"lake.{ns}.good", f"{ns}.stringly"]
    evs = evaluate_all(lake_config, asked, int(time.time() * 1000))
    rows = {e.table: e for e in evs}
    for name in asked[:3]:
        assert rows[name].status == "invalid config" and rows[name].reason.startswith(f"table {name}: "), rows[name]
    assert "namespace.table" in rows["no_namespace"].reason
    assert "'other' is not the configured" in rows[f"other.{ns}.good"].reason
    assert rows[f"{ns}.good"].eligible  # lake.<ns>.good, evaluated under its short name
    bad = rows[f"{ns}.stringly"]
    assert bad.status == "invalid config" and "compaction.offset.column='value'" in bad.reason, bad
    assert "secret" not in bad.reason


def test_a_runs_params_name_tables_as_commands_do_and_an_unknown_one_fails_the_run(spark, lake_config):
    """The DAG's tables and clear_uncleanable params: a catalog-qualified name is the table; a typo,
    another namespace's table or a name with nothing to clear fails the run naming it (a typo used to
    clean nothing, a "cleared" typo wrote a stray document, and the run passed)."""
    ns, other = (f"{p}{int(time.time() * 1000) % 10**8}" for p in ("rp", "ro"))
    for name in (f"{ns}.orders", f"{ns}.stuck", f"{other}.elsewhere"):  # elsewhere also misconfigured
        props = {"compaction.strategy": "bogus"} if name.startswith(other) else {}
        append(spark, create_compacted_table(spark, lake_config, name, props), _rows(0, 8))
    cfg = LakecleanerConfig(catalog=lake_config.catalog,
                            cleaner=type(lake_config.cleaner)(namespaces=(ns,), uncleanable_after_failures=1))
    now = int(time.time() * 1000) + 1
    record_outcome(cfg, f"{ns}.stuck", ok=False, error="boom", now_ms=now)
    run = plan_run(cfg, now, tables=[f"lake.{ns}.orders", f"{ns}.ordrs", f"{other}.elsewhere"],
                   clear_uncleanable=[f"lake.{ns}.stuck", f"{ns}.stuk"])
    assert [j.table for j in run.jobs] == [f"{ns}.orders"]
    missing = {e.table: e.reason for e in run.evaluations if e.status == "not found"}
    assert set(missing) == {f"{ns}.ordrs", f"{other}.elsewhere", f"{ns}.stuk"}, missing
    assert missing[f"{ns}.ordrs"] == f"table {ns}.ordrs: no such table in catalog lake (asked for in tables)"
    assert "not among the tables this DAG cleans (cleaner.namespaces " + ns in missing[f"{other}.elsewhere"]
    assert missing[f"{ns}.stuk"].endswith("(asked for in clear_uncleanable)")
    assert {e.table: e.status for e in run.evaluations}[f"{ns}.stuck"] != "uncleanable"  # cleared
    assert read_document(cfg, f"state/{document_name(f'{ns}.stuk', '.clear')}") is None  # no stray clear
    verdict = summarize(list(run.evaluations), run.planned(), {}, {}, [])
    assert set(verdict.failed) >= set(missing) and verdict.failure()
    assert plan_run(cfg, now, tables=[f"{ns}.ordrs"]).jobs == ()  # not every table: none


@pytest.mark.parametrize("format_version", [2, 3])
def test_manifest_reads_match_pyiceberg_over_specs_and_deletes(spark, lake_config, format_version):
    """Evaluation reads manifests with a cached reader tree: what it reads must be what pyiceberg's
    own manifest API reads, through appends, a compaction (deleted and existing entries) and a
    partition spec change (two header schemas in one table); on v3 too, whose manifests carry row
    lineage and whose compaction writes deletion vectors (delete manifests, read for the delete
    figures)."""
    from lakecleaner.core.metadata import MetadataReader, read_live_entries, read_manifest_list

    ns = f"mr{int(time.time() * 1000) % 10**8}"
    ref = create_compacted_table(spark, lake_config, f"{ns}.t", format_version=format_version)
    for start in range(0, 60, 20):
        append(spark, ref, [{**r, "partition": r["offset"] % 2} for r in _rows(start, 20)])
    compact_table(spark, lake_config, f"{ns}.t")
    spark.sql(f"ALTER TABLE {ref.sql()} ADD PARTITION FIELD bucket(2, key)")
    append(spark, ref, _rows(60, 10))
    tbl = MetadataReader(lake_config).load(f"{ns}.t")
    snapshot = tbl.current_snapshot()
    theirs, ours = [], []
    for manifest in snapshot.manifests(tbl.io):
        theirs += [(e.snapshot_id, e.status, e.data_file.file_path, e.data_file.file_size_in_bytes,
                    dict(e.data_file.lower_bounds or {}), dict(e.data_file.upper_bounds or {}),  # a DV has none
                    tuple(e.data_file.partition))
                   for e in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True)]
    manifests = read_manifest_list(tbl.io, snapshot.manifest_list)
    assert [m.manifest_path for m in manifests] == [m.manifest_path for m in snapshot.manifests(tbl.io)]
    for manifest in manifests:
        ours += [(e.snapshot_id, e.status, e.data_file.file_path, e.data_file.file_size_in_bytes,
                  dict(e.data_file.lower_bounds or {}), dict(e.data_file.upper_bounds or {}), tuple(e.data_file.partition))
                 for e in read_live_entries(tbl.io, manifest)]
    assert len({len(t[-1]) for t in ours}) == 2 and len(ours) > 4  # both specs, several files
    assert sorted(ours, key=repr) == sorted(theirs, key=repr)
    assert all(e[0] is not None for e in ours)  # snapshot ids inherited from the manifest
    assert tbl.format_version == format_version
    [ev] = evaluate_all(LakecleanerConfig(catalog=lake_config.catalog), [f"{ns}.t"], int(time.time() * 1000))
    assert ev.status in ("eligible", "not eligible") and 0 < ev.dirty_ratio < 1 and ev.clean_bytes > 0, ev
    _delete_figures_match_spark(spark, ref, ev, format_version)


def _delete_figures_match_spark(spark, ref, ev, format_version):
    """Evaluation's delete files and bytes are Spark's delete_files metadata table's (a DV's bytes
    its blob's) and the snapshot summary's totals; maintenance's figure, read by the Java API, is
    the same."""
    from lakecleaner.spark.catalog import iceberg_table, snapshot_summary
    from lakecleaner.spark.maintenance import table_deletes

    rows = spark.table(ref.meta("delete_files")).collect()
    assert rows and {r["file_format"] for r in rows} == {"PUFFIN" if format_version == 3 else "PARQUET"}
    size = [r["content_size_in_bytes"] if r["file_format"] == "PUFFIN" else r["file_size_in_bytes"] for r in rows]
    assert (ev.delete_files, ev.delete_bytes) == (len(rows), sum(size)), ev
    summary = snapshot_summary(spark, ref)
    data_bytes = spark.sql(f"SELECT sum(file_size_in_bytes) AS b FROM {ref.meta('data_files')}").collect()[0]["b"]
    assert ev.delete_files == int(summary["total-delete-files"])
    assert ev.delete_bytes + data_bytes == int(summary["total-files-size"])
    assert ev.delete_ratio == round(int(summary["total-position-deletes"]) / int(summary["total-records"]), 4) > 0
    figures = table_deletes(spark, iceberg_table(spark, ref))
    assert (figures.files, figures.bytes, figures.ratio) == (ev.delete_files, ev.delete_bytes, ev.delete_ratio)


def test_corrupt_manifest_makes_only_its_table_unreadable(spark, lake_config):
    ns = f"cm{int(time.time() * 1000) % 10**8}"
    for name in ("good", "bad"):
        append(spark, create_compacted_table(spark, lake_config, f"{ns}.{name}"), _rows(0, 4))
    meta_dir = Path(lake_config.catalog.warehouse) / ns / "bad" / "metadata"
    manifest = next(p for p in meta_dir.glob("*-m0.avro"))
    manifest.write_bytes(manifest.read_bytes()[:40])
    for crc in meta_dir.glob(".*.crc"):
        crc.unlink()
    cfg = LakecleanerConfig(catalog=lake_config.catalog, cleaner=type(lake_config.cleaner)(namespaces=(ns,)))
    evs = {e.table: e for e in evaluate_all(cfg)}
    assert evs[f"{ns}.bad"].status == "unreadable" and evs[f"{ns}.bad"].reason.startswith(f"table {ns}.bad: ")
    assert evs[f"{ns}.good"].eligible


def test_each_manifest_is_read_once_across_evaluations(spark, lake_config, monkeypatch):
    """Evaluation keeps what each manifest said: a second run reads no manifest, a run after one
    more append reads one, and the figures are those of reading every manifest; a damaged cache
    document is ignored."""
    from lakecleaner.core import metadata

    ns = f"mc{int(time.time() * 1000) % 10**8}"
    ref = create_compacted_table(spark, lake_config, f"{ns}.t")
    for start in range(0, 40, 10):
        append(spark, ref, _rows(start, 10))
    compact_table(spark, lake_config, f"{ns}.t")
    for start in range(40, 70, 10):
        append(spark, ref, _rows(start, 10))
    cfg = LakecleanerConfig(catalog=lake_config.catalog, cleaner=type(lake_config.cleaner)(namespaces=(ns,)))
    reads = []
    real = metadata.read_live_entries
    monkeypatch.setattr(metadata, "read_live_entries", lambda io, m: reads.append(m.manifest_path) or real(io, m))
    now = int(time.time() * 1000) + 1
    uncached = metadata.MetadataReader(cfg).read(f"{ns}.t")
    reads.clear()
    first = evaluate_all(cfg, now_ms=now)[0]
    manifests = len(reads)
    assert manifests >= 4 and len(set(reads)) == manifests
    reads.clear()
    again = evaluate_all(cfg, now_ms=now)[0]
    assert reads == [] and again.as_dict() == first.as_dict()
    cached = metadata.MetadataReader(cfg, metadata.ManifestStatsCache(cfg)).read(f"{ns}.t")
    assert sorted(cached.files, key=repr) == sorted(uncached.files, key=repr)
    append(spark, ref, _rows(70, 10))
    now = int(time.time() * 1000) + 1
    later = evaluate_all(cfg, now_ms=now)[0]
    assert len(reads) == 1 and later.cleanable_bytes > first.cleanable_bytes
    doc = Path(cfg.state_root.removeprefix("file:")) / "evaluation" / f"{ns}.t.json"
    doc.write_text("{ damaged")
    reads.clear()
    assert evaluate_all(cfg, now_ms=now)[0].as_dict() == later.as_dict() and len(reads) == manifests + 1
    reads.clear()
    assert evaluate_all(cfg, now_ms=now)[0].as_dict() == later.as_dict() and reads == []  # rewritten


def test_evaluation_reads_the_tables_tags_from_metadata(spark, lake_config):
    ns = f"evref{int(time.time() * 1000) % 10**8}"
    ref = create_compacted_table(spark, lake_config, f"{ns}.tagged", {"max.compaction.lag.ms": "1"})
    append(spark, ref, _rows(0, 4))
    spark.sql(f"ALTER TABLE {ref.sql()} CREATE TAG `kept_for_ever`")
    append(spark, ref, _rows(4, 4))
    time.sleep(0.01)
    cfg = LakecleanerConfig(catalog=lake_config.catalog, cleaner=type(lake_config.cleaner)(namespaces=(ns,)))
    [ev] = evaluate_all(cfg, now_ms=int(time.time() * 1000) + 10)
    assert "tag 'kept_for_ever' keeps snapshot" in ev.physical_deletion
