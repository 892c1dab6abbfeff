"""The package a lakecleaner Spark application needs (``--py-files``: the core and the Spark layer),
built by the task that submits the application, in its own scratch space, when it runs.

The mapped ``clean`` and ``forget`` tasks may run on another machine than the ``evaluate`` task that
planned them (another pod under the KubernetesExecutor, another Celery worker), and share no disk
with it: their arguments (XCom) name no file one machine made, only the deployment's own (the job in
the installed package, the config as mounted: the same on every worker of one image), and each
builds the zip afresh in a private directory
of its own ``$TMPDIR`` (lakecleaner.core.submit.built_package), removed when ``spark-submit``
returns. Nothing found on disk is trusted, whoever could have written it.

Client deploy mode only: there the driver runs inside the task's spark-submit and reads the zip from
the task's disk. In cluster deploy mode (YARN, Kubernetes) the driver runs elsewhere and reads the code
from ``code_uri`` (lakecleaner.core.cluster), which the task's arguments already name: nothing is built.

``ShipsPackage`` is a mixin, so that it composes with other SparkSubmitOperator subclasses::

    class MyOperator(ShipsPackage, SomeOtherMixin, SparkSubmitOperator): ...

(lakecleaner.airflow.operators.LakecleanerSubmitOperator, the DAG's, is one.)
"""
from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from lakecleaner.core.submit import built_package


class ShipsPackage:
    """A SparkSubmitOperator mixin: in client deploy mode ``execute`` builds the lakecleaner package in
    this task's scratch space, adds it to the operator's ``py_files`` and submits; the package goes
    when the submission returns (in client mode, when the application ends). In cluster deploy mode it
    submits as it is (the code comes from ``code_uri``)."""

    py_files: str | None

    def cluster_mode(self) -> bool:
        """Whether spark-submit sends the driver elsewhere (this task's deploy_mode, else the connection's)."""
        mode = self._deploy_mode or self._get_hook()._connection["deploy_mode"]  # type: ignore[attr-defined]
        return mode == "cluster"

    def execute(self, context: Any) -> Any:
        if self.cluster_mode():
            return super().execute(context)  # type: ignore[misc]
        shipped = self.py_files
        with built_package() as package:
            self.py_files = ",".join(p for p in (shipped, package) if p)
            self._hook = None  # the hook takes the package when it is built (an earlier one would not have it)
            try:
                return super().execute(context)  # type: ignore[misc]
            finally:
                self.py_files = shipped


class PackageShippingSparkSubmitOperator(ShipsPackage, SparkSubmitOperator):
    """SparkSubmitOperator that ships the lakecleaner package it builds itself (ShipsPackage)."""
