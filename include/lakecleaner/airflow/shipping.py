"""The package a lakecleaner Spark application needs (``--py-files``: the core and the Spark layer),
built by the task that submits the application, in its own scratch space, when it runs.

The mapped ``clean`` and ``forget`` tasks may run on another machine than the ``evaluate`` task that
planned them (another pod under the KubernetesExecutor, another Celery worker), and share no disk
with it: their arguments (XCom) name no file, and each builds the zip afresh in a private directory
of its own ``$TMPDIR`` (lakecleaner.core.submit.built_package), removed when ``spark-submit``
returns. Nothing found on disk is trusted, whoever could have written it.

``ShipsPackage`` is a mixin, so that it composes with other SparkSubmitOperator subclasses::

    class MyOperator(ShipsPackage, SomeOtherMixin, SparkSubmitOperator): ...
"""
from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from lakecleaner.core.submit import built_package


class ShipsPackage:
    """A SparkSubmitOperator mixin: ``execute`` builds the lakecleaner package in this task's
    scratch space, adds it to the operator's ``py_files`` and submits; the package goes when the
    submission returns (in client mode, when the application ends)."""

    py_files: str | None

    def execute(self, context: Any) -> Any:
        with built_package() as package:
            self.py_files = ",".join(p for p in (self.py_files, package) if p)
            return super().execute(context)  # type: ignore[misc]


class PackageShippingSparkSubmitOperator(ShipsPackage, SparkSubmitOperator):
    """SparkSubmitOperator that ships the lakecleaner package it builds itself (ShipsPackage)."""
