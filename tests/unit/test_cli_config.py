"""``lakecleaner config check FILE`` (for CI: exit 0, or every problem on stderr) and ``lakecleaner
config schema`` (the file's JSON Schema, for editors), through the CLI's main."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from lakecleaner.cli import main
from lakecleaner.core.config import CONFIG_ENV, DEFAULT_CONFIG_PATH, SECTIONS

SECRET = "FAKE-S3CR3T-c0ffee-4711"
DEMO_CONFIG = Path(__file__).resolve().parents[2] / "include" / "lakecleaner_dev" / "lakecleaner.yaml"


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch):
    monkeypatch.delenv(CONFIG_ENV, raising=False)


def test_check_a_valid_file_exits_0(tmp_path, capsys):
    path = tmp_path / "ok.yaml"
    path.write_text("catalog:\n  type: rest\n  warehouse: s3://b/wh\n  properties: {uri: 'http://r:8181'}\n")
    assert main(["config", "check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert f"{path}: a valid lakecleaner config" in out and err == ""


@pytest.mark.parametrize("path", [DEFAULT_CONFIG_PATH, DEMO_CONFIG])
def test_check_the_shipped_and_demo_configs(path, capsys):
    assert main(["config", "check", str(path)]) == 0


def test_check_an_invalid_file_lists_every_problem_and_no_secret(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(f"catalog:\n  properties: 'token={SECRET}'\nspark:\n  driver_memory: lots\ncleaner:\n  threads: 0\n")
    assert main(["config", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert [re.match(r"lakecleaner: lakecleaner config: ([\w.]+)", line).group(1) for line in lines] == [
        "catalog.properties", "spark.driver_memory", "cleaner.threads"], err
    assert all(line.startswith("lakecleaner: lakecleaner config: ") for line in lines)
    assert SECRET not in err + out and str(path) in err


def test_check_a_missing_file(tmp_path, capsys):
    assert main(["config", "check", str(tmp_path / "nope.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_check_without_a_file_checks_the_one_the_commands_would_read(tmp_path, monkeypatch, capsys):
    path = tmp_path / "env.yaml"
    path.write_text("cleaner:\n  threads: 0\n")
    monkeypatch.setenv(CONFIG_ENV, str(path))
    assert main(["config", "check"]) == 2
    assert "cleaner.threads" in capsys.readouterr().err


def schema(capsys) -> dict:
    assert main(["config", "schema"]) == 0
    return json.loads(capsys.readouterr().out)


def test_schema_describes_every_section(capsys):
    doc = schema(capsys)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(doc["properties"]) == set(SECTIONS) and doc["additionalProperties"] is False
    assert "source" not in json.dumps(doc["properties"])  # where a config came from: not a setting


def test_schema_names_the_rules_of_the_registry(capsys):
    from lakecleaner.core.quality_rules import rule_names

    severity = schema(capsys)["$defs"]["QualityConfig"]["properties"]["severity"]
    assert list(severity["properties"]) == list(rule_names()) and severity["additionalProperties"] is False


def test_schema_accepts_what_loads_and_refuses_what_does_not(capsys, monkeypatch):
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(schema(capsys))
    for path in (DEFAULT_CONFIG_PATH, DEMO_CONFIG):
        assert not list(validator.iter_errors(yaml.safe_load(path.read_text()))), path
    good = {"catalog": {"type": "rest", "properties": {"uri": "http://r", "retries": 3}},
            "spark": {"driver_memory": "4g", "conf": {"spark.sql.shuffle.partitions": 8}},
            "cleaner": {"threads": "${LC_THREADS}", "namespaces": ["a"]},  # a reference is a value an editor allows
            "defaults": {"delete.retention.ms": 1000, "compaction.key.columns": ["a", "b"]},
            "quality": {"severity": {"one record per key": "warn"}},
            "notifiers": [{"class": "a.B", "kwargs": {"to": "x"}, "alerts": ["uncleanable"]}]}
    assert not list(validator.iter_errors(good))
    for bad in ({"spark": {"conf": ["a=1"]}}, {"catalog": {"properties": "uri=x"}}, {"catalog": {"warehouse": 5}},
                {"spark": {"driver_memory": "2g --conf x=y"}}, {"catalog": {"type": "nessie"}},
                {"cleaner": {"threads": 0}}, {"quality": {"severity": {"one record per kee": "warn"}}},
                {"defaults": {"log.cleaner.threads": 1}}, {"notifiers": [{"class": "a.B", "to": "x"}]},
                {"catalogue": {}}, {"spark": {"conf": {"spark.jars": "/a.jar"}}}, {"spark": {"extra_jars": "/a.jar"}}):
        assert list(validator.iter_errors(bad)), bad


def _hadoop_lake(tmp_path) -> Path:
    (tmp_path / "wh" / "sales").mkdir(parents=True)
    path = tmp_path / "lake.yaml"
    path.write_text(f"catalog:\n  type: hadoop\n  warehouse: {tmp_path / 'wh'}\n")
    return path


def test_evaluate_refuses_a_namespace_the_catalog_does_not_have(tmp_path, capsys):
    """A mistyped --namespace listed nothing and exited 0, as an empty namespace does."""
    config = _hadoop_lake(tmp_path)
    assert main(["--config", str(config), "evaluate", "--namespace", "sales", "--namespace", "sals"]) == 2
    assert "namespace='sals' is invalid: not in catalog lake" in capsys.readouterr().err
    assert main(["--config", str(config), "evaluate", "--namespace", "sales", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_evaluate_exits_1_naming_a_table_it_cannot_evaluate(tmp_path, capsys):
    """An invalid, unreadable or uncleanable row is shown and fails the command (scripts, CI)."""
    config = _hadoop_lake(tmp_path)
    assert main(["--config", str(config), "evaluate", "sales.missing", "no_namespace", "--json"]) == 1
    out, err = capsys.readouterr()
    assert {r["table"]: r["status"] for r in json.loads(out)} == {"sales.missing": "unreadable",
                                                                   "no_namespace": "invalid config"}
    assert "lakecleaner: unreadable: table sales.missing: no such table in catalog lake\n" in err
    assert "lakecleaner: invalid config: table no_namespace: table=" in err, err


def test_clear_uncleanable_says_when_there_is_nothing_to_clear(tmp_path, capsys):
    """A mistyped name was "no longer marked uncleanable" (exit 0); the real one is still cleared."""
    from lakecleaner.core.config import load_config
    from lakecleaner.core.state import StateStore

    config = _hadoop_lake(tmp_path)
    store = StateStore(load_config(str(config)))
    for at in (1, 2, 3):
        store.record_failure("sales.orders", "boom", now_ms=at)
    assert store.get("sales.orders").uncleanable
    assert main(["--config", str(config), "clear-uncleanable", "sales.ordres", "sales.orders", "lake.sales.orders"]) == 1
    out, err = capsys.readouterr()
    assert "table sales.ordres: no failed run is counted and it is not marked uncleanable: nothing to clear" in err
    assert "sales.orders is no longer marked uncleanable" in out and "ordres" not in out
    assert not store.get("sales.orders").uncleanable


def test_clear_uncleanable_of_one_table_named_twice_clears_it_once(tmp_path, capsys):
    from lakecleaner.core.config import load_config
    from lakecleaner.core.state import StateStore

    config = _hadoop_lake(tmp_path)
    StateStore(load_config(str(config))).record_failure("sales.orders", "boom", now_ms=1)
    assert main(["--config", str(config), "clear-uncleanable", "sales.orders", "lake.sales.orders"]) == 0
    assert capsys.readouterr().out.count("its failed runs counted so far are forgiven") == 1  # not marked yet: 1 of 3
