"""A log generator that behaves like real producers, for the demo and the benchmarks.

Several producers write the same key space. Each write gets the next version of its key and a
send time; the network delays it by a random amount, so the broker (the landing job) sees the
writes in arrival order, which is not the producers' order: exactly the KIP-280 problem. The
broker assigns offsets per partition in arrival order and the landing job appends fixed-size
batches, one Iceberg snapshot each.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

from lakecleaner.core.strategies import encode_version_header


@dataclass(frozen=True)
class Mix:
    """How often each kind of record appears (fractions of all writes)."""

    delete: float = 0.08  # a remove(key)
    put_null: float = 0.02  # put(key, null) with tombstone=false (KIP-87: not a delete)
    flagless_delete: float = 0.5  # of deletes: null value with no flag (legacy producers)
    keyless: float = 0.005  # a record with no key: quarantined
    malformed_header: float = 0.01  # version header of the wrong length: anomalous
    repeated_header: float = 0.05  # version header sent twice; the last counts
    max_delay_ms: int = 1500  # network delay spread; larger means more reordering


def partition_of(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def produce(n_records: int, n_keys: int, partitions: int = 2, producers: int = 3, batch_size: int = 500,
            seed: int = 7, mix: Mix = Mix(), start_ms: int = 1_700_000_000_000,
            version_header: str = "version") -> list[list[dict]]:
    """Batches of Kafka-shaped rows (KAFKA_SCHEMA plus `ver`, the producer's version)."""
    rng = random.Random(seed)
    versions: dict[str, int] = {}
    sends = []
    clock = start_ms
    for i in range(n_records):
        producer = i % producers
        clock += rng.randint(0, 3)
        key = f"key-{rng.randrange(n_keys):06d}"
        versions[key] = versions.get(key, 0) + 1
        arrival = clock + rng.randint(0, mix.max_delay_ms)
        sends.append((arrival, i, producer, key, versions[key], clock))
    sends.sort()  # the broker sees writes in arrival order
    next_offset = [0] * partitions
    rows = []
    for _arrival, _, producer, key, version, sent_at in sends:
        p = partition_of(key, partitions)
        roll = rng.random()
        value, tombstone = f"{key}@v{version} from producer-{producer}", False
        if roll < mix.delete:
            if rng.random() < mix.flagless_delete:
                value, tombstone = None, None  # no flag: the null value is the delete
            else:
                tombstone = True
                if rng.random() < 0.5:
                    value = None
        elif roll < mix.delete + mix.put_null:
            value, tombstone = None, False  # put(key, null): a live record
        header = [{"key": version_header, "value": encode_version_header(version)}]
        roll = rng.random()
        if roll < mix.malformed_header:
            header = [{"key": version_header, "value": encode_version_header(version)[:4]}]
        elif roll < mix.malformed_header + mix.repeated_header:
            header = [{"key": version_header, "value": encode_version_header(version - 1)}] + header
        header.append({"key": "producer", "value": f"producer-{producer}".encode()})
        rows.append({
            "key": None if rng.random() < mix.keyless else key,
            "offset": next_offset[p], "partition": p, "timestamp": sent_at, "headers": header,
            "tombstone": tombstone, "value": value, "ver": version,
        })
        next_offset[p] += 1
    return [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]


def cdc_rows(batches: list[list[dict]], tenants: int = 3) -> list[list[dict]]:
    """The same stream as a CDC table: composite key (tenant, id), source LSN as the version."""
    out = []
    for batch in batches:
        rows = []
        for r in batch:
            key = r["key"]
            ident = int(key.split("-")[1]) if key else None
            rows.append({"tenant": None if key is None else f"tenant-{ident % tenants}", "id": ident,
                         "lsn": r["ver"],  # the source commit order of this row's changes
                         "op": "d" if r["tombstone"] else "u", "tombstone": r["tombstone"],
                         "payload": r["value"], "offset": r["offset"], "partition": r["partition"]})
        out.append(rows)
    return out


CDC_SCHEMA = ("`tenant` string, `id` bigint, `lsn` bigint, `op` string, `tombstone` boolean, `payload` string, "
              "`offset` bigint, `partition` int")
