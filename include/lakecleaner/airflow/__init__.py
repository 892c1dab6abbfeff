"""The Airflow face: the DAG factory (``lakecleaner_dag``), the Lake Cleaner page (plugin), notifiers,
metrics, assets and the provider's metadata. Imported lazily: ``lakecleaner.airflow.dashboard`` and
the provider info load without Airflow's SDK; ``from lakecleaner.airflow import lakecleaner_dag``
imports the factory."""
from __future__ import annotations

__all__ = ["lakecleaner_dag"]


def __getattr__(name: str):
    if name == "lakecleaner_dag":
        from lakecleaner.airflow.dag import lakecleaner_dag

        return lakecleaner_dag
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
