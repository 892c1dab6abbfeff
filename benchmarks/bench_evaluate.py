"""Evaluation cost per table, from metadata, vs deciding by counting dirty rows with Spark.

Builds two real tables with many snapshots (appends, a compaction, more appends): one left with a
manifest per append, as a table nobody has maintained looks, and one whose manifests maintenance
merged. Each is copied into N tables that are complete Iceberg tables of their own: the metadata
files, manifest lists and manifests are copied with every path inside them rewritten to the copy
(data files are not copied: evaluation never opens one), so no two tables share a metadata file
and no cache keyed by path can make one table's reads serve another's. Then `evaluate_all` is
timed over 1/4 of the tables and over all of them, for both kinds (median of --repeat runs, each in
the same process, as the DAG's evaluate task reads them), then, in separate passes, Python's peak
memory (above the rows it returns) over 1/4 and over all of them (flat in the number of tables: no per-table state is kept;
tracemalloc slows Python, so it is never on while timing), and in the same run Spark counting each
table's dirty rows. Each timing is taken cold (evaluation's per-manifest cache removed first: every
manifest is read) and warm (the cache the previous run left: no manifest is read again).

Usage: python benchmarks/bench_evaluate.py [--tables 1000] [--snapshots 12] [--spark-sample 40] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
import tracemalloc
import zlib
from pathlib import Path

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import META_SCHEMA, AvroFileHeader
from pyiceberg.avro.resolver import construct_reader

from lakecleaner.core.config import CHECKPOINT_PROPERTY, CatalogConfig, CleanerConfig, LakecleanerConfig, SparkConfig
from lakecleaner.core.table import TableRef
from lakecleaner.spark.engine import compact_table
from lakecleaner.spark.maintenance import maintain_table
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.scheduler import evaluate_all
from lakecleaner.spark.session import get_spark
from lakecleaner_dev.tables import append, create_compacted_table

NS = "evalbench"
TEMPLATES = {"t": "tmpl_t", "m": "tmpl_m"}  # as long as a copy's name (t00000): paths keep their length


def _zigzag(n: int) -> bytes:
    n, out = (n << 1) ^ (n >> 63), bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def rewrite_avro(data: bytes, old: bytes, new: bytes) -> bytes:
    """An Avro container file with ``old`` replaced by ``new`` (same length, so every string's
    length prefix stays right) inside each data block, blocks recompressed with the file's codec."""
    assert len(old) == len(new)
    dec = new_decoder(data)
    header = construct_reader(META_SCHEMA, {-1: AvroFileHeader}).read(dec)
    codec = header.meta.get("avro.codec", "null")
    assert codec in ("null", "deflate"), codec
    out = bytearray(data[:dec.tell()])
    while dec.tell() < len(data):
        count, payload = dec.read_int(), dec.read_bytes()
        plain = zlib.decompress(payload, -15) if codec == "deflate" else payload
        plain = plain.replace(old, new)
        if codec == "deflate":
            packer = zlib.compressobj(6, zlib.DEFLATED, -15)
            plain = packer.compress(plain) + packer.flush()
        out += _zigzag(count) + _zigzag(len(plain)) + plain + dec.read(16)
    return bytes(out)


def copy_table(src: Path, dst: Path, with_data: bool) -> None:
    """The table's metadata tree at ``dst``, every path in it pointing into ``dst`` (and its data
    files, for the tables Spark counts)."""
    old, new = str(src).encode(), str(dst).encode()
    (dst / "metadata").mkdir(parents=True)
    if with_data:
        shutil.copytree(src / "data", dst / "data")
    for f in (src / "metadata").iterdir():
        if f.suffix == ".crc":  # Hadoop's checksums of the originals; without one, a file is not checked
            continue
        data = f.read_bytes()
        data = rewrite_avro(data, old, new) if f.suffix == ".avro" else data.replace(old, new)
        (dst / "metadata" / f.name).write_bytes(data)


def evaluate_ms(cfg, names: list[str], repeat: int, cold: bool) -> float:
    """Median over ``repeat`` runs of evaluate_all's wall time per table. Cold: evaluation's
    manifest cache is removed before each run (every manifest is read, as on a table's first
    evaluation or when every manifest is new); warm: it is kept from the previous run (the
    manifests already seen are not read again)."""
    runs = []
    for _ in range(repeat):
        if cold:
            shutil.rmtree(Path(cfg.state_root.removeprefix("file:")) / "evaluation", ignore_errors=True)
        t0 = time.perf_counter()
        evs = evaluate_all(cfg, names)
        runs.append(1000 * (time.perf_counter() - t0) / len(names))
        assert all(e.status in ("eligible", "not eligible") for e in evs), evs[0]
    return statistics.median(runs)


def peak_mb(cfg, names: list[str]) -> float:
    """Python's peak memory during evaluate_all above what its answer (one row per table) holds."""
    tracemalloc.start()
    evs = evaluate_all(cfg, names)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del evs
    return round((peak - held) / 2**20, 2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--snapshots", type=int, default=12)
    parser.add_argument("--spark-sample", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    wh = Path(__file__).resolve().parent / "results" / "eval_warehouse"
    shutil.rmtree(wh, ignore_errors=True)
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(wh)), spark=SparkConfig(driver_memory="2g"),
                            cleaner=CleanerConfig(namespaces=(NS,)))
    spark = get_spark(cfg, "lakecleaner-bench-evaluate")

    def template(name: str) -> TableRef:
        ref = create_compacted_table(spark, cfg, name)
        offset = 0
        for i in range(args.snapshots):
            append(spark, ref, [{"key": f"k{j % 50}", "offset": offset + j, "partition": j % 2, "value": "v"}
                                for j in range(100)])
            offset += 100
            if i == args.snapshots // 2:
                compact_table(spark, cfg, name)
        return ref

    ref = template(f"{NS}.{TEMPLATES['t']}")  # one manifest per append: a table nobody has maintained
    template(f"{NS}.{TEMPLATES['m']}")
    maintain_table(spark, cfg, f"{NS}.{TEMPLATES['m']}")  # merges the manifests
    for prefix, tmpl in TEMPLATES.items():
        for n in range(args.tables):
            copy_table(wh / NS / tmpl, wh / NS / f"{prefix}{n:05d}", with_data=n < args.spark_sample)
    results = {}
    quarter = max(1, args.tables // 4)
    for prefix in TEMPLATES:
        names = [f"{NS}.{prefix}{n:05d}" for n in range(args.tables)]
        evaluate_all(cfg, names[:5])  # imports and first reads
        for count in (quarter, args.tables):
            results[(prefix, count)] = {
                "tables": count, "manifests": "one per append" if prefix == "t" else "merged by maintenance",
                "ms_per_table_cold": round(evaluate_ms(cfg, names[:count], args.repeat, cold=True), 2),
                "ms_per_table_warm": round(evaluate_ms(cfg, names[:count], args.repeat, cold=False), 2),
                "python_peak_mb": peak_mb(cfg, names[:count])}
            print(json.dumps(results[(prefix, count)]), flush=True)
    # Deciding by counting dirty rows with Spark, on a sample of the same tables.
    ckpt = Checkpoint.from_json(dict((r["key"], r["value"]) for r in spark.sql(
        f"SHOW TBLPROPERTIES {ref.sql()}").collect())[CHECKPOINT_PROPERTY])
    pred = " OR ".join(f"(`partition` = {p} AND `offset` > {o})" for p, o in ckpt.offsets.items())
    sample = [TableRef.parse(f"{NS}.t{n:05d}", "lake") for n in range(args.spark_sample)]
    spark.table(sample[0].sql()).where(pred).count()  # warm up the JVM
    t0 = time.perf_counter()
    for r in sample:
        spark.table(r.sql()).where(pred).count()
    spark_ms = 1000 * (time.perf_counter() - t0) / len(sample)
    spark.stop()
    full, merged = results[("t", args.tables)], results[("m", args.tables)]
    print(f"\nmetadata evaluation, {args.tables} tables, ms per table, every manifest read (cold) / only new ones "
          f"(warm): {full['ms_per_table_cold']} / {full['ms_per_table_warm']} with a manifest per append "
          f"({args.snapshots} appends), {merged['ms_per_table_cold']} / {merged['ms_per_table_warm']} once maintenance "
          "merged them (target <= 5 ms)")
    for prefix in TEMPLATES:
        small, big = results[(prefix, quarter)], results[(prefix, args.tables)]
        print(f"python peak memory ({small['manifests']}): {small['python_peak_mb']} MB for {quarter} tables, "
              f"{big['python_peak_mb']} MB for {args.tables} (target: flat)")
    print(f"spark dirty-row count: {spark_ms:.1f} ms/table; metadata evaluation is "
          f"{spark_ms / full['ms_per_table_cold']:.1f}x / {spark_ms / merged['ms_per_table_cold']:.1f}x cheaper, "
          "cold (target >= 20x)")
    out = Path(__file__).resolve().parent / "results"
    (out / f"evaluate-{int(time.time())}.json").write_text(json.dumps(
        {"runs": list(results.values()), "spark_count_ms_per_table": round(spark_ms, 2)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
