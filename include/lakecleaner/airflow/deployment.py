"""The lakecleaner DAGs of this deployment, as Airflow's metadata database knows them: what the Lake
Cleaner page (lakecleaner.airflow.plugin, in the API server) serves.

A lakecleaner DAG is a DAG tagged ``lakecleaner`` (lakecleaner.airflow.dag.TAG, which every DAG of
``lakecleaner_dag()`` carries) that is not stale (its file still defines it; a deleted DAG has no row
at all). Its config is the one its tasks read: the ``config`` the factory handed its ``evaluate`` task
(``op_kwargs``, as the serialized DAG keeps it; None when the DAG runs on the ``[lakecleaner] config``
option), resolved by lakecleaner.airflow.dag.config_path, the function the tasks resolve it with; and
its catalog connection, if any (``catalog_conn_id`` there, else ``[lakecleaner] catalog_conn_id``),
looked up through the API server's own secrets backends, as each task looks it up through the
worker's. No DAG file is parsed here: the serialized DAG is read through Airflow's SerializedDagModel.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from lakecleaner.core.config import LakecleanerConfig

log = logging.getLogger("lakecleaner")

EVALUATE_TASK = "evaluate"  # the task of lakecleaner_dag() whose op_kwargs carry the config


class Unconfigured(Exception):
    """A lakecleaner DAG whose config cannot be told or loaded; the message says which DAG and why."""


@dataclass(frozen=True)
class LakeDag:
    """A lakecleaner DAG: its config's path and catalog connection, or why they cannot be told."""
    dag_id: str
    config: str | None
    problem: str | None = None
    catalog_conn_id: str | None = None

    def load(self) -> LakecleanerConfig:
        """Its config, read now (each request reads it afresh, as each task does), its catalog
        connection's settings merged over its catalog section. Raises Unconfigured."""
        from lakecleaner.airflow.catalog import catalog_properties
        from lakecleaner.core.config import ConfigError, load_config

        if self.problem is not None:
            raise Unconfigured(f"lakecleaner DAG {self.dag_id}: {self.problem}")
        if not Path(self.config).is_file():
            raise Unconfigured(f"lakecleaner DAG {self.dag_id}: its config {self.config} is not a file the API "
                               "server can read")
        try:
            cfg = load_config(self.config)
        except (ConfigError, OSError) as exc:
            raise Unconfigured(f"lakecleaner DAG {self.dag_id}: its config {self.config} cannot be loaded: "
                               f"{exc}") from None
        try:
            return cfg.with_catalog(catalog_properties(self.catalog_conn_id))
        except ConfigError as exc:  # never a value: a connection's are credentials
            raise Unconfigured(f"lakecleaner DAG {self.dag_id}: its catalog connection {self.catalog_conn_id} "
                               f"cannot be used: {exc}") from None


def tagged_dag_ids(dag_id: str | None = None) -> list[str]:
    """The ids of the DAGs tagged ``lakecleaner`` that are not stale, by id (only ``dag_id``, if given)."""
    from sqlalchemy import select

    from airflow.models.dag import DagModel, DagTag
    from airflow.utils.session import create_session

    from lakecleaner.airflow.dag import TAG

    query = (select(DagModel.dag_id).join(DagTag, DagTag.dag_id == DagModel.dag_id)
             .where(DagTag.name == TAG, DagModel.is_stale.is_(False)).order_by(DagModel.dag_id))
    if dag_id is not None:
        query = query.where(DagModel.dag_id == dag_id)
    with create_session(scoped=False) as session:
        return list(session.scalars(query))


# (dag_id, dag_hash) -> the evaluate task's config value, or the problem, and its catalog_conn_id: a
# serialized DAG is deserialized once per version, not on every request.
_CONFIG_VALUES: dict[tuple[str, str], tuple[tuple[str | None, str | None], str | None]] = {}


def config_value(serialized_dag) -> tuple[str | None, str | None]:
    """The ``config`` lakecleaner_dag() passed to the evaluate task of ``serialized_dag`` (an
    Airflow SerializedDAG), and None; or None and why there is none."""
    task = serialized_dag.task_dict.get(EVALUATE_TASK)
    if task is None:
        return None, f"it has no {EVALUATE_TASK} task: not a DAG of lakecleaner_dag()"
    kwargs = getattr(task, "op_kwargs", None)
    if not isinstance(kwargs, dict) or "config" not in kwargs:
        return None, f"its {EVALUATE_TASK} task takes no config: not a DAG of lakecleaner_dag()"
    value = kwargs["config"]
    if value is not None and not isinstance(value, str):
        return None, f"its {EVALUATE_TASK} task's config is not a path: {value!r}"
    return value, None


def catalog_conn_value(serialized_dag) -> str | None:
    """The ``catalog_conn_id`` lakecleaner_dag() passed to the evaluate task of ``serialized_dag`` (None:
    none given, the [lakecleaner] option's, if any, applies)."""
    task = serialized_dag.task_dict.get(EVALUATE_TASK)
    value = (getattr(task, "op_kwargs", None) or {}).get("catalog_conn_id") if task is not None else None
    return value if isinstance(value, str) and value else None


def lake_dags(dag_ids: Iterable[str]) -> list[LakeDag]:
    """The lakecleaner DAGs ``dag_ids`` (already known to be tagged) with their configs, by id."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    from lakecleaner.airflow.dag import catalog_conn, config_path
    from lakecleaner.core.config import ConfigError

    dag_ids = sorted(dag_ids)
    with create_session(scoped=False) as session:
        rows = {r.dag_id: r for r in SerializedDagModel.get_latest_serialized_dags(dag_ids=dag_ids, session=session)}
        found = {}
        for dag_id, row in rows.items():
            key = (dag_id, row.dag_hash)
            if key not in _CONFIG_VALUES:
                try:
                    value = (config_value(row.dag), catalog_conn_value(row.dag))
                except Exception as exc:  # noqa: BLE001 - this DAG's group says so; the others are shown
                    log.warning("lakecleaner: cannot read the serialized DAG %s: %s", dag_id, exc)
                    value = ((None, f"its serialized DAG cannot be read: {exc}"), None)
                if len(_CONFIG_VALUES) >= 1024:  # versions long replaced: forget them all
                    _CONFIG_VALUES.clear()
                _CONFIG_VALUES[key] = value
            found[dag_id] = _CONFIG_VALUES[key]
    out = []
    for dag_id in dag_ids:
        if dag_id not in found:
            out.append(LakeDag(dag_id, None, "it is not serialized yet (the dag-processor has not parsed it)"))
            continue
        (value, problem), conn_id = found[dag_id]
        if problem is None:
            try:
                value = config_path(value)
            except ConfigError as exc:  # None, and no [lakecleaner] config in the API server's Airflow config
                problem = str(exc)
        out.append(LakeDag(dag_id, value if problem is None else None, problem, catalog_conn(conn_id)))
    return out


def find(dag_id: str) -> LakeDag | None:
    """The lakecleaner DAG ``dag_id``; None if there is no such DAG, it is stale, or not a lakecleaner DAG."""
    return lake_dags([dag_id])[0] if tagged_dag_ids(dag_id) else None
