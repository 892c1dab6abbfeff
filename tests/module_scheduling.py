"""How ``make test``'s pytest-xdist workers share the tests: each test module is one unit of work,
run in order by one worker, so a module's fixtures are built once (a lake and its first DAG run, a
live Airflow); modules that share a session fixture of their own form one unit. The units are
queued in collection order, which :func:`heaviness` sorts heaviest first.

Not xdist's ``--dist loadgroup`` with ``xdist_group`` marks: it groups by renaming each item
(``item._nodeid``), which pytest 9.2's ``Node.nodeid`` no longer reads, so a group's tests go to
both workers and its set-up is built twice (tests/test_module_scheduling.py)."""
from __future__ import annotations

# ui_lake's two lakes, API server and Chromium serve both modules (tests/ui_lake.py).
SHARED_SETUP = {"tests/airflow/test_browser.py": "ui_lake", "tests/airflow/test_plugin_api.py": "ui_lake"}
# The heaviest modules first (the one-process run of 2026-11-26, slowest first): a long module
# started last would run alone at the end.
HEAVIEST_FIRST = tuple(f"tests/{m}.py" for m in (
    "airflow/test_airflow_on_postgres", "spark/test_engine_vs_model", "airflow/test_dag_end_to_end",
    "spark/test_forget", "spark/test_failures", "spark/test_chaos", "spark/test_cases_on_spark",
    "airflow/test_no_shared_disk", "test_installed_wheel", "spark/test_postgres_catalog",
    "spark/test_quality", "spark/test_batch", "airflow/test_browser",
    "spark/test_physical_deletion", "airflow/test_catalog_connection_dag",
))


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def heaviness(nodeid: str) -> int:
    """The sort key of a test: its module's place in HEAVIEST_FIRST, the others after."""
    module = module_of(nodeid)
    return HEAVIEST_FIRST.index(module) if module in HEAVIEST_FIRST else len(HEAVIEST_FIRST)


def work_unit(nodeid: str, shared: dict[str, str] = SHARED_SETUP) -> str:
    module = module_of(nodeid)
    return shared.get(module, module)


def make_scheduler(config, log, shared: dict[str, str] = SHARED_SETUP):
    """xdist's scope scheduling with :func:`work_unit` as the scope (xdist imported here: the unit
    tests' Python 3.12 venv has no xdist and only sorts)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, shared)

    return ModuleScheduling(config, log)
