"""lakecleaner: Kafka log-compaction semantics (KIP-280, KIP-87, KIP-354) for Apache Iceberg tables."""

__version__ = "0.1.0"
