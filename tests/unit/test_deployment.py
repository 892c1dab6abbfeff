"""lakecleaner.airflow.deployment without a metadata database: which config a serialized DAG's
evaluate task names, and what a lakecleaner DAG whose config cannot be loaded says. (Finding the
DAGs in Airflow's database: tests/airflow/test_plugin_api.py, on a real API server.)"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from lakecleaner.airflow.deployment import LakeDag, Unconfigured, config_value


def _dag(**tasks) -> SimpleNamespace:
    """A stand-in for Airflow's SerializedDAG: its task_dict, each task with its op_kwargs."""
    return SimpleNamespace(task_dict={tid: SimpleNamespace(op_kwargs=kw) for tid, kw in tasks.items()})


def test_the_config_is_the_one_the_factory_gave_the_evaluate_task():
    assert config_value(_dag(evaluate={"config": "/lakes/a.yaml", "schedule": None}, summary={})) == (
        "/lakes/a.yaml", None)
    assert config_value(_dag(evaluate={"config": None, "schedule": "*/15 * * * *"})) == (None, None)  # the option's


@pytest.mark.parametrize("dag, problem", [
    (_dag(summary={"config": "/x.yaml"}), "has no evaluate task"),
    (_dag(evaluate={"schedule": None}), "takes no config"),
    (_dag(evaluate=None), "takes no config"),
    (_dag(evaluate={"config": ["/x.yaml"]}), "is not a path"),
])
def test_a_dag_tagged_lakecleaner_but_not_built_by_the_factory_says_why(dag, problem):
    value, why = config_value(dag)
    assert value is None and problem in why


def test_a_lake_dag_loads_its_own_config_or_says_which_dag_and_why(tmp_path):
    good = tmp_path / "a.yaml"
    good.write_text(f"catalog:\n  name: a\n  type: hadoop\n  warehouse: {tmp_path / 'wa'}\n")
    assert LakeDag("lake_a", str(good)).load().catalog.name == "a"
    bad = tmp_path / "bad.yaml"
    bad.write_text("nonsense: 1\n")
    for lake, said in ((LakeDag("lake_b", None, "no lakecleaner config"), "lake_b: no lakecleaner config"),
                       (LakeDag("lake_c", str(tmp_path / "missing.yaml")), "missing.yaml is not a file"),
                       (LakeDag("lake_d", str(tmp_path)), "is not a file"),
                       (LakeDag("lake_e", str(bad)), "cannot be loaded: lakecleaner config: nonsense")):
        with pytest.raises(Unconfigured, match="lakecleaner DAG ") as exc:
            lake.load()
        assert said in str(exc.value)
