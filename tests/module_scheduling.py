"""How ``make test``'s pytest-xdist workers share the tests: each test module is one unit of work,
run in order by one worker, so a module's fixtures are built once (a lake and its first DAG run, a
live Airflow); modules that share a session fixture of their own form one unit. The units are
queued in collection order, which tests/conftest.py sorts heaviest first.

Not xdist's ``--dist loadgroup`` with ``xdist_group`` marks: it groups by renaming each item
(``item._nodeid``), which pytest 9.2's ``Node.nodeid`` no longer reads, so a group's tests go to
both workers and its set-up is built twice (tests/test_module_scheduling.py)."""
from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

# ui_lake's two lakes, API server and Chromium serve both modules (tests/ui_lake.py).
SHARED_SETUP = {"tests/airflow/test_browser.py": "ui_lake", "tests/airflow/test_plugin_api.py": "ui_lake"}


def work_unit(nodeid: str, shared: dict[str, str] = SHARED_SETUP) -> str:
    module = nodeid.split("::", 1)[0]
    return shared.get(module, module)


class ModuleScheduling(LoadScopeScheduling):
    shared = SHARED_SETUP

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid, self.shared)
