"""make test's workers (tests/module_scheduling.py), on a small suite run by pytest-xdist for
real: a module's tests run on one worker with its module fixture built once, and two modules named
as sharing a set-up (a session fixture of a plugin, as ui_lake) run on the same worker, the set-up
built once."""
import json
from pathlib import Path

import pytest

pytest.importorskip("xdist")
pytest_plugins = ["pytester"]

CONFTEST = """
import sys
sys.path.insert(0, {tests!r})
from module_scheduling import make_scheduler

def pytest_xdist_make_scheduler(config, log):
    return make_scheduler(config, log, shared={{"test_ui_a.py": "ui", "test_ui_b.py": "ui"}})
"""
RECORD = """
import json, os

def record(**row):
    with open({log!r}, "a") as out:
        out.write(json.dumps({{**row, "worker": os.environ["PYTEST_XDIST_WORKER"]}}) + "\\n")
"""
UI_PLUGIN = """
import pytest
from record import record

@pytest.fixture(scope="session")
def ui():
    record(built="ui")
"""
TESTS = """
import pytest
from record import record
pytest_plugins = ["ui_plugin"]

@pytest.fixture(scope="module")
def lake():
    record(built="{name}")
""" + "".join(f"\ndef test_{i}({{fixture}}):\n    record(ran='{{name}}')\n" for i in range(4))


def test_a_module_and_a_shared_set_up_each_run_on_one_worker_built_once(pytester):
    log = pytester.path / "log.jsonl"
    pytester.makeconftest(CONFTEST.format(tests=str(Path(__file__).parent)))
    pytester.makepyfile(record=RECORD.format(log=str(log)), ui_plugin=UI_PLUGIN)
    pytester.makepyfile(test_lake=TESTS.format(name="test_lake", fixture="lake"),
                        test_ui_a=TESTS.format(name="test_ui_a", fixture="ui"),
                        test_ui_b=TESTS.format(name="test_ui_b", fixture="ui"),
                        test_other="".join(f"def test_{i}():\n    pass\n" for i in range(8)))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadscope", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=20)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    workers = {}
    for row in rows:
        if "ran" in row:
            workers.setdefault(row["ran"], set()).add(row["worker"])
    assert set(workers) == {"test_lake", "test_ui_a", "test_ui_b"}
    assert all(len(w) == 1 for w in workers.values()), workers  # a module on one worker
    assert workers["test_ui_a"] == workers["test_ui_b"], workers  # the shared set-up: one unit
    assert sorted(r["built"] for r in rows if "built" in r) == ["test_lake", "ui"]  # each set-up once
