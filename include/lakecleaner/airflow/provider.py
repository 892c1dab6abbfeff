"""lakecleaner as an Airflow provider: what ``airflow providers list`` shows, the ``[lakecleaner]``
section of airflow.cfg (typed, documented, with defaults; each option also settable as
``AIRFLOW__LAKECLEANER__<OPTION>``), the ``iceberg://`` asset URI scheme and the
``airflow lakecleaner`` command. Found by the ``apache_airflow_provider`` entry point; imports
nothing of Airflow, so listing providers stays cheap.

The Lake Cleaner page is registered once, by the ``airflow.plugins`` entry point, not here: Airflow
records a second registration of one plugin as an import error.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from lakecleaner.core.defaults import DEFAULT_SCHEDULE

SECTION = "lakecleaner"
DEFAULT_DAG_ID = "lakecleaner"  # lakecleaner_dag()'s, the one the shipped dags/ file builds
DEFAULT_POOL = "lakecleaner"  # what airflow lakecleaner create-pool creates unless told otherwise


@dataclass(frozen=True)
class Option:
    """One option of the [lakecleaner] section: its one default, for the provider info and the code
    that reads it (lakecleaner.airflow.dag.setting)."""
    name: str
    type: str  # the provider schema's: string | boolean | integer | float
    default: str
    example: str
    description: str


OPTIONS = (
    Option("config", "string", "", "/opt/airflow/lakecleaner/lake.yaml",
           "The lakecleaner YAML of a DAG built by lakecleaner_dag() without config=: its catalog, Spark "
           "settings, cleaner and quality settings. The worker, the Spark driver and the API server read it."),
    Option("schedule", "string", DEFAULT_SCHEDULE, "0 * * * *",
           "The schedule of a DAG built without schedule=: a cron expression, or none for triggered runs only."),
    Option("spark_conn_id", "string", "spark_default", "spark_cluster",
           "The Airflow connection of type spark naming the Spark master (and deploy mode) the cleaning "
           "applications are submitted to, for a DAG built without spark_conn_id=."),
    Option("catalog_conn_id", "string", "", "iceberg_lake",
           "An Airflow connection (the Apache Iceberg provider's iceberg type) whose catalog settings (type, URI, "
           "warehouse, credentials, FileIO settings) are merged over the YAML's catalog section, for a DAG built "
           "without catalog_conn_id=; resolved through the deployment's secrets backends when a task runs and by "
           "the Lake Cleaner page. Empty: the YAML's catalog alone."),
    Option("pool", "string", "", DEFAULT_POOL,
           "An Airflow pool the Spark applications of a DAG built without pool= run in (empty: the default "
           "pool; a run never submits more than cleaner.threads applications at once either way). Create it "
           "with airflow lakecleaner create-pool."),
    Option("code_uri", "string", "", "local:///opt/lakecleaner",
           "Cluster deploy mode (YARN, Kubernetes): the URI the driver and executors read lakecleaner's code from, "
           "a directory holding what `lakecleaner code-bundle DIR` writes (lakecleaner.zip and the job files), for "
           "a DAG built without code_uri=. local:// names a directory in the cluster's image or nodes; hdfs://, "
           "s3a://, https:// work too. Unused in client mode."),
    Option("config_uri", "string", "", "local:///etc/lakecleaner/lake.yaml",
           "Cluster deploy mode: where the driver reads its config, a path or local:// URI in its own file system "
           "(e.g. a Kubernetes secret mounted with spark.kubernetes.driver.secrets.<name>), for a DAG built without "
           "config_uri=. Empty: the worker's config goes to the driver inline, as an application argument, and "
           "must then write no secret out (only ${NAME}s, which the driver resolves from its environment)."),
)
OPTION_DEFAULTS = {o.name: o.default for o in OPTIONS}


def package_version() -> str:
    try:
        return version("lakecleaner")
    except PackageNotFoundError:  # a checkout on sys.path without an install
        from lakecleaner import __version__

        return __version__


def get_provider_info() -> dict:
    """The provider's metadata, in Airflow's provider_info schema."""
    return {
        "package-name": "lakecleaner",
        "name": "lakecleaner",
        "description": "Kafka log compaction (KIP-280, KIP-87, KIP-354) for Apache Iceberg tables: a DAG factory, "
                       "the Lake Cleaner page, Spark applications.",
        "versions": [package_version()],
        "integrations": [{"integration-name": "Apache Iceberg", "external-doc-url": "https://iceberg.apache.org/",
                          "python-modules": ["lakecleaner.airflow.dag"], "tags": ["software"]}],
        "config": {SECTION: {
            "description": "lakecleaner: the defaults of DAGs built by lakecleaner_dag(); each keyword argument "
                           "of the factory overrides its option.",
            "options": {o.name: {"description": o.description, "version_added": "0.1.0", "type": o.type,
                                 "example": o.example, "default": o.default} for o in OPTIONS},
        }},
        "asset-uris": [{"schemes": ["iceberg"], "handler": "lakecleaner.airflow.assets.normalize_table_uri",
                        "to_openlineage_converter": "lakecleaner.airflow.lineage.iceberg_asset_to_openlineage"}],
        "cli": ["lakecleaner.airflow.commands.get_cli_commands"],
    }
