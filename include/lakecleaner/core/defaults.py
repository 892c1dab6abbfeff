"""Defaults more than one face of the cleaner reads (the CLI, the Spark jobs, the scheduler, the
DAG factory and the provider's [lakecleaner] options), each spelled once. Imports nothing: the
provider's info reads it, and listing Airflow's providers stays cheap."""
from __future__ import annotations

# A run's schedule interval: the DAG's default schedule, and the interval assumed where none can be
# read (a triggered-only DAG, the CLI): the guarantees count one interval (a tombstone may outlive its
# horizon by one; an erasure deadline adds one).
DEFAULT_INTERVAL_MINUTES = 15
DEFAULT_INTERVAL_MS = DEFAULT_INTERVAL_MINUTES * 60_000
DEFAULT_SCHEDULE = f"*/{DEFAULT_INTERVAL_MINUTES} * * * *"
