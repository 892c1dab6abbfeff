"""The DAG's spark-submit: the Spark provider's SparkSubmitOperator, whose ``execute`` first writes what
must not pass through argv, XCom, the rendered fields or the logs (the catalog's Spark conf, the
secret settings of ``spark.conf``, the record of a catalog from a connection: lakecleaner.core.launch)
to a private ``--properties-file`` (0600, in a 0700 directory of its own), and removes it when
spark-submit has ended, however it ended.

Client deploy mode only: in cluster mode Spark hands its configuration to a driver elsewhere (its
JVM command line, a Kubernetes ConfigMap, YARN's staging directory), so nothing secret leaves the
worker; the driver gets its secrets by the cluster's own means (lakecleaner.core.cluster).
"""
from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator


class LakecleanerSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator with lakecleaner's private properties file. ``lakecleaner_config`` is the
    DAG's config (None: ``[lakecleaner] config``), ``catalog_conn_id`` its catalog connection (None:
    ``[lakecleaner] catalog_conn_id``, else the YAML's catalog), both read again when the task runs."""

    def __init__(self, *, lakecleaner_config: str | None = None, catalog_conn_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lakecleaner_config = lakecleaner_config
        self.catalog_conn_id = catalog_conn_id

    def cluster_mode(self) -> bool:
        """Whether spark-submit sends the driver elsewhere (this task's deploy_mode, else the connection's)."""
        return (self._deploy_mode or self._get_hook()._connection["deploy_mode"]) == "cluster"

    def execute(self, context: Any) -> None:
        if self.cluster_mode():
            return super().execute(context)
        from lakecleaner.airflow.dag import catalog_and_config
        from lakecleaner.core.launch import private_conf, properties_file

        given, cfg = catalog_and_config(self.lakecleaner_config, self.catalog_conn_id)
        with properties_file(private_conf(cfg, given)) as path:
            self.properties_file, self._hook = path, None  # the hook takes the file when it is built
            try:
                return super().execute(context)
            finally:
                self.properties_file = None
