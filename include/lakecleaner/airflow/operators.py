"""The DAG's spark-submit: the Spark provider's SparkSubmitOperator, whose ``execute``, in client deploy
mode, first writes what must not pass through argv, XCom, the rendered fields or the logs (the
catalog's Spark conf, the secret settings of ``spark.conf``, the record of a catalog from a connection:
lakecleaner.core.launch) to a private ``--properties-file`` (0600, in a 0700 directory of its own), then
builds the package it ships (``--py-files``, in a private directory of the task's own scratch space:
lakecleaner.airflow.shipping.ShipsPackage), and removes both when spark-submit has ended, however it
ended.

Client deploy mode only: in cluster mode Spark hands its configuration to a driver elsewhere (its
JVM command line, a Kubernetes ConfigMap, YARN's staging directory), so nothing secret leaves the
worker; the driver gets its secrets by the cluster's own means and its code from ``code_uri``
(lakecleaner.core.cluster), and the task writes and builds nothing.

Where Airflow's OpenLineage provider is installed and a transport configured, the provider asks the
task for its lineage when it ends (``get_openlineage_facets_on_complete``): the tables its application
compacted or erased from, named as OpenLineage names Iceberg tables (lakecleaner.airflow.lineage).
"""
from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from lakecleaner.airflow.shipping import ShipsPackage


class LakecleanerSubmitOperator(ShipsPackage, SparkSubmitOperator):
    """SparkSubmitOperator with lakecleaner's private properties file and the package it builds itself
    (ShipsPackage), both in client deploy mode only. ``lakecleaner_config`` is the DAG's config (None:
    ``[lakecleaner] config``), ``catalog_conn_id`` its catalog connection (None: ``[lakecleaner]
    catalog_conn_id``, else the YAML's catalog), both read again when the task runs.

    ``execute`` (this class's, then ShipsPackage's, then SparkSubmitOperator's): the properties file,
    then the package, then spark-submit; each removed as its block ends."""

    def __init__(self, *, lakecleaner_config: str | None = None, catalog_conn_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lakecleaner_config = lakecleaner_config
        self.catalog_conn_id = catalog_conn_id

    def execute(self, context: Any) -> None:
        if self.cluster_mode():  # ShipsPackage's: nothing written, nothing built
            return super().execute(context)
        from lakecleaner.airflow.dag import catalog_and_config
        from lakecleaner.core.launch import private_conf, properties_file

        given, cfg = catalog_and_config(self.lakecleaner_config, self.catalog_conn_id)
        with properties_file(private_conf(cfg, given)) as path:
            self.properties_file, self._hook = path, None  # the hook takes the file when it is built
            try:
                return super().execute(context)  # ShipsPackage: builds the package, then submits
            finally:
                self.properties_file = None

    def get_openlineage_facets_on_complete(self, task_instance):
        """The OpenLineage provider's hook (called only where it is installed; on failure too, for
        the tables committed before it): the tables this application changed, from its report or
        the request table (lakecleaner.airflow.lineage, imported here: without the provider,
        nothing of OpenLineage is ever imported)."""
        from lakecleaner.airflow.lineage import operator_lineage

        return operator_lineage(self, task_instance)
