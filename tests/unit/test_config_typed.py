"""The YAML config as a typed model (lakecleaner.core.config): every section and value typed, each
mistake a ConfigError naming the setting's path, and never a value under catalog, spark.conf or
notifiers (they hold credentials; an error's text reaches logs and the plugin's HTTP answers)."""
from __future__ import annotations

import dataclasses

import pytest

from lakecleaner.core.config import (CONFIG_ENV, CatalogConfig, CleanerConfig, ConfigError, LakecleanerConfig,
                                     NotifierSpec, SparkConfig, load_config)

SECRET = "FAKE-S3CR3T-c0ffee-4711"  # stands for a credential: must never appear in an error


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch):
    monkeypatch.delenv(CONFIG_ENV, raising=False)


def load_error(tmp_path, text: str) -> ConfigError:
    path = tmp_path / "lakecleaner.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert str(err).startswith("lakecleaner config: "), str(err)
    assert str(path) in str(err), str(err)  # which file, for CI
    return err


def assert_hidden(err: ConfigError, path: str, problem: str) -> None:
    """The error names the path and the problem, and no value (neither the attribute nor the text)."""
    msg = str(err)
    assert err.prop == path, msg
    assert msg.startswith(f"lakecleaner config: {path}: {problem}"), msg
    assert err.value is None and err.hidden
    assert SECRET not in msg and SECRET not in repr(err) and SECRET not in str(err.args)


# ---------------------------------------------------------------- the examples
@pytest.mark.parametrize("text, path, problem", [
    (f"spark:\n  conf: [spark.hadoop.fs.s3a.secret.key={SECRET}]\n", "spark.conf", "expected a mapping, got a list"),
    (f"catalog:\n  properties: 'token={SECRET}'\n", "catalog.properties", "expected a mapping, got a string"),
    ("catalog:\n  warehouse: 5\n", "catalog.warehouse", "expected a string, got an integer"),
])
def test_the_reviews_malformed_values_are_refused_at_load_naming_the_path(tmp_path, text, path, problem):
    assert_hidden(load_error(tmp_path, text), path, problem)


def test_a_driver_memory_with_more_in_it_is_refused(tmp_path):
    err = load_error(tmp_path, "spark:\n  driver_memory: 2g --conf x=y\n")
    assert err.prop == "spark.driver_memory" and err.value == "2g --conf x=y"  # not a secret path: shown
    assert "must be a JVM memory size" in str(err)


@pytest.mark.parametrize("size", ["2g", "512m", "1024", "4G", "2gb", "1t"])
def test_driver_memory_sizes_spark_reads(size):
    assert SparkConfig(driver_memory=size).driver_memory == size


# ---------------------------------------------------------------- secrets never echoed
@pytest.mark.parametrize("text, path, problem", [
    # a typo'd credential key: the review's plugin answered 503 with the secret in it
    (f"catalog:\n  propertis: {{credential: {SECRET}}}\n", "catalog.propertis", "unknown key"),
    (f"catalog:\n  properties: {{credential: [{SECRET}]}}\n", "catalog.properties.credential",
     "expected a string, number or boolean, got a list"),
    (f"catalog:\n  spark_properties: {{jdbc.password: {{v: {SECRET}}}}}\n", "catalog.spark_properties.jdbc.password",
     "expected a string, number or boolean, got a mapping"),
    ("catalog:\n  pyiceberg_properties: {uri: null}\n", "catalog.pyiceberg_properties.uri",
     "expected a string, number or boolean, got null"),
    (f"catalog:\n  name: '{SECRET}'\n", "catalog.name", "must be a name of letters, digits and _"),
    (f"catalog:\n  type: '{SECRET}'\n", "catalog.type", "must be one of hadoop, rest, sql, hive, glue"),
    (f"catalog: '{SECRET}'\n", "catalog", "expected a mapping, got a string"),
    (f"spark:\n  conf: {{spark.hadoop.fs.s3a.secret.key: [{SECRET}]}}\n", "spark.conf.spark.hadoop.fs.s3a.secret.key",
     "expected a string, number or boolean, got a list"),
    (f"spark:\n  conf: {{fs.s3a.secret.key: {SECRET}}}\n", "spark.conf.fs.s3a.secret.key",
     "not a Spark setting (Spark's settings start with spark.)"),
    (f"spark:\n  conf: '{SECRET}'\n", "spark.conf", "expected a mapping, got a string"),
    (f"notifiers:\n  - class: x.Y\n    kwarg: {{token: {SECRET}}}\n", "notifiers[0].kwarg", "unknown key"),
    (f"notifiers:\n  - class: x.Y\n    kwargs: {SECRET}\n", "notifiers[0].kwargs", "expected a mapping, got a string"),
    (f"notifiers:\n  - class: '{SECRET}'\n", "notifiers[0].class", "must be an importable dotted path"),
    (f"notifiers:\n  - class: x.Y\n    alerts: [{SECRET}]\n", "notifiers[0].alerts[0]", "must be one of uncleanable"),
    (f"notifiers:\n  - '{SECRET}'\n", "notifiers[0]", "expected a mapping, got a string"),
    (f"notifiers: {{token: {SECRET}}}\n", "notifiers", "expected a list, got a mapping"),
])
def test_no_value_under_catalog_spark_conf_or_notifiers_is_ever_echoed(tmp_path, text, path, problem):
    assert_hidden(load_error(tmp_path, text), path, problem)


def test_a_yaml_syntax_error_names_the_place_not_the_line(tmp_path):
    """PyYAML's own message quotes the offending line: that line may be a credential."""
    err = load_error(tmp_path, f"catalog:\n  properties: {{token: {SECRET}, ]\n")
    assert err.prop == "<file>" and "not valid YAML" in str(err) and "line 2" in str(err)
    assert SECRET not in str(err)


def test_every_mistake_is_kept_the_first_is_the_message(tmp_path):
    err = load_error(tmp_path, "cleaner:\n  threads: 0\nspark:\n  driver_memory: lots\n  master: ''\n")
    assert err.prop == "spark.master"  # in the model's order: catalog, spark (master, ..., driver_memory), cleaner
    assert [e.prop for e in err.problems] == ["spark.master", "spark.driver_memory", "cleaner.threads"]


def test_the_hidden_value_form_of_config_error():
    err = ConfigError(None, "catalog.properties.token", SECRET, "must be short")
    assert str(err) == "lakecleaner config: catalog.properties.token: must be short"
    assert err.value is None and err.hidden
    shown = ConfigError(None, "cleaner.threads", 0, "must be a positive integer")
    assert str(shown) == "lakecleaner config: cleaner.threads=0 is invalid: must be a positive integer"
    assert shown.value == 0 and not shown.hidden
    # any path, named without its value on request
    assert str(ConfigError(None, "x.y", SECRET, "bad", hide_value=True)) == "lakecleaner config: x.y: bad"
    assert "s3cr3t" not in str(ConfigError("db.t", "p", "s3cr3t", "bad", hide_value=True))


# ---------------------------------------------------------------- what twelve of 41 let through
@pytest.mark.parametrize("text, path", [
    ("spark:\n  master: 5\n", "spark.master"),
    ("spark:\n  master: 'local[2] --conf x=y'\n", "spark.master"),
    ("spark:\n  iceberg_runtime: latest\n", "spark.iceberg_runtime"),
    ("spark:\n  iceberg_runtime: [a]\n", "spark.iceberg_runtime"),
    ("spark:\n  driver_memory: 2\n", "spark.driver_memory"),
    ("spark:\n  conf: {spark.x: [1, 2]}\n", "spark.conf.spark.x"),
    ("spark:\n  conf:\n", "spark.conf"),
    ("catalog:\n  properties: [uri, x]\n", "catalog.properties"),
    ("catalog:\n  spark_properties: 5\n", "catalog.spark_properties"),
    ("catalog:\n  warehouse: [a, b]\n", "catalog.warehouse"),
    ("catalog:\n  warehouse:\n", "catalog.warehouse"),
    ("catalog:\n  name: 5\n", "catalog.name"),
    ("cleaner:\n  state_location: 5\n", "cleaner.state_location"),
    ("cleaner:\n  namespaces: [1]\n", "cleaner.namespaces"),
    ("cleaner:\n  own_files_retention_days: 1.5\n", "cleaner.own_files_retention_days"),
    ("quality:\n  severity: [one record per key]\n", "quality.severity"),
    ("quality:\n  severity: {one record per key: error}\n", "quality.severity.one record per key"),
    ("quality:\n  anomalous_share_max: '0.1.2'\n", "quality.anomalous_share_max"),
    ("erasure: []\n", "erasure"),
    ("erasure:\n  key_hash_secret_env: 5\n", "erasure.key_hash_secret_env"),
    ("defaults:\n  delete.retention.ms: {a: 1}\n", "defaults.delete.retention.ms"),
])
def test_malformed_values_are_refused_naming_their_path(tmp_path, text, path):
    assert load_error(tmp_path, text).prop == path


def test_numbers_may_be_written_as_strings_as_an_environment_variable_gives_them(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("cleaner:\n  threads: '3'\n  application_budget_s: '90.5'\nquality:\n  anomalous_share_max: '0.1'\n")
    cfg = load_config(path)
    assert (cfg.cleaner.threads, cfg.cleaner.application_budget_s, cfg.quality.anomalous_share_max) == (3, 90.5, 0.1)


def test_scalar_properties_are_strings_for_both_engines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("catalog:\n  type: rest\n  properties: {uri: 'http://r', retries: 3, ssl: true}\n"
                    "spark:\n  conf: {spark.ui.enabled: false, spark.sql.shuffle.partitions: 4}\n")
    cfg = load_config(path)
    assert dict(cfg.catalog.properties) == {"uri": "http://r", "retries": "3", "ssl": "true"}
    assert dict(cfg.spark.conf) == {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}


# ---------------------------------------------------------------- built in Python: the same model
def test_a_config_built_in_python_is_checked_too():
    with pytest.raises(ConfigError) as err:
        SparkConfig(driver_memory="2g --conf x=y")
    assert err.value.prop == "spark.driver_memory"
    with pytest.raises(ConfigError) as err:
        CatalogConfig(properties={"token": [SECRET]})
    assert_hidden(err.value, "catalog.properties.token", "expected a string, number or boolean, got a list")
    with pytest.raises(ConfigError) as err:
        LakecleanerConfig(spark={"conf": [SECRET]})
    assert_hidden(err.value, "spark.conf", "expected a mapping, got a list")
    with pytest.raises(ConfigError, match="cleaner.thread"):
        CleanerConfig(thread=2)


def test_the_models_keep_the_shape_the_code_uses():
    cfg = LakecleanerConfig(catalog=CatalogConfig(name="cat", type="rest", warehouse="s3://b/wh"),
                            spark=SparkConfig(master="local[1]"), cleaner=CleanerConfig(namespaces=("a",)))
    assert (cfg.catalog.name, cfg.spark.master, cfg.cleaner.namespaces, cfg.source) == ("cat", "local[1]", ("a",),
                                                                                       "<built-in>")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.catalog.name = "other"  # type: ignore[misc]
    changed = dataclasses.replace(cfg, cleaner=dataclasses.replace(cfg.cleaner, threads=4))
    assert changed.cleaner.threads == 4 and changed.catalog == cfg.catalog
    with pytest.raises(ConfigError, match="cleaner.threads"):
        dataclasses.replace(cfg.cleaner, threads=0)  # replace checks as construction does
    assert NotifierSpec("a.B", {"to": "x"}) == NotifierSpec(class_path="a.B", kwargs={"to": "x"})


# ---------------------------------------------------------------- ${VAR} from the environment
def load(tmp_path, text: str):
    path = tmp_path / "lakecleaner.yaml"
    path.write_text(text)
    return load_config(path)


def test_a_variable_is_replaced_by_its_environment_value(tmp_path, monkeypatch):
    monkeypatch.setenv("LC_TEST_TOKEN", SECRET)
    monkeypatch.setenv("LC_TEST_HOST", "rest.example")
    monkeypatch.setenv("LC_TEST_THREADS", "3")
    monkeypatch.setenv("LC_TEST_EMPTY", "")
    cfg = load(tmp_path, "catalog:\n  type: rest\n  warehouse: s3://b/wh\n"
                         "  properties: {uri: 'https://${LC_TEST_HOST}:8181/v1', token: '${LC_TEST_TOKEN}'}\n"
                         "cleaner:\n  threads: ${LC_TEST_THREADS}\n  namespaces: ['${LC_TEST_EMPTY}a']\n"
                         "notifiers:\n  - class: x.Y\n    kwargs: {subject: '{{ alert.subject }} on ${LC_TEST_HOST}'}\n")
    assert dict(cfg.catalog.properties) == {"uri": "https://rest.example:8181/v1", "token": SECRET}
    assert cfg.cleaner.threads == 3 and cfg.cleaner.namespaces == ("a",)  # a set but empty variable is ""
    assert cfg.notifiers[0].kwargs == {"subject": "{{ alert.subject }} on rest.example"}


def test_an_unset_variable_is_an_error_naming_it_and_the_path(tmp_path, monkeypatch):
    monkeypatch.delenv("LC_TEST_UNSET", raising=False)
    err = load_error(tmp_path, "catalog:\n  properties: {token: '${LC_TEST_UNSET}'}\n")
    assert_hidden(err, "catalog.properties.token", "environment variable LC_TEST_UNSET is not set")
    err = load_error(tmp_path, "cleaner:\n  state_location: /data/${LC_TEST_UNSET}/state\n")
    assert err.prop == "cleaner.state_location" and "environment variable LC_TEST_UNSET is not set" in str(err)


@pytest.mark.parametrize("written, loaded", [
    ("$${LC_TEST_TOKEN}", "${LC_TEST_TOKEN}"),  # $${ is a literal ${
    ("a$$b", "a$$b"),  # any other $ is itself
    ("$x ${LC_TEST_HOST} $", "$x h $"),
    ("$$${LC_TEST_HOST}", "$${LC_TEST_HOST}"),
])
def test_dollar_dollar_brace_is_a_literal(tmp_path, monkeypatch, written, loaded):
    monkeypatch.setenv("LC_TEST_TOKEN", SECRET)
    monkeypatch.setenv("LC_TEST_HOST", "h")
    assert load(tmp_path, f"cleaner:\n  state_location: '{written}'\n").cleaner.state_location == loaded


@pytest.mark.parametrize("written", ["${LC_TEST", "${}", "${1X}", "${A-B}", "${A:-default}"])
def test_a_malformed_reference_is_an_error(tmp_path, written):
    err = load_error(tmp_path, f"spark:\n  conf: {{spark.x: '{written}'}}\n")
    assert err.prop == "spark.conf.spark.x" and "malformed ${" in str(err) and "$${" in str(err)


def test_a_value_from_the_environment_is_not_read_again(tmp_path, monkeypatch):
    monkeypatch.setenv("LC_TEST_TOKEN", "${NOT_A_REFERENCE}")
    assert load(tmp_path, "catalog:\n  properties: {t: '${LC_TEST_TOKEN}'}\n").catalog.properties["t"] == \
        "${NOT_A_REFERENCE}"


def test_a_config_document_keeps_literal_dollar_braces(tmp_path):
    """config_document hands a config to another process as YAML: a value holding ${ (a password) is
    written as $${, so the other process reads the same value."""
    import yaml

    from lakecleaner.core.config import config_document

    cfg = LakecleanerConfig(catalog=CatalogConfig(type="rest", warehouse="s3://b/wh",
                                                  properties={"credential": "p${a}$${b}"}))
    path = tmp_path / "doc.yaml"
    path.write_text(yaml.safe_dump(config_document(cfg, cleaner={"state_location": "/s/${x}"})))
    loaded = load_config(path)
    assert loaded.catalog == cfg.catalog and loaded.cleaner.state_location == "/s/${x}"


# ---------------------------------------------------------------- a Hadoop catalog is a local one
@pytest.mark.parametrize("warehouse", ["s3a://bucket/wh", "s3://bucket/wh", "hdfs://nn:8020/wh", "gs://b/wh",
                                       "abfss://c@acct.dfs.core.windows.net/wh", "file://otherhost/wh"])
def test_a_hadoop_catalog_on_a_warehouse_that_is_not_local_is_refused(tmp_path, warehouse):
    """Its tables are found by listing the warehouse directory (pyiceberg has no Hadoop catalog), which
    only a local file system allows: such a catalog listed zero tables, without an error, for ever."""
    err = load_error(tmp_path, f"catalog:\n  name: shop\n  type: hadoop\n  warehouse: '{warehouse}'\n")
    assert err.prop == "catalog.warehouse" and err.value is None
    assert "hadoop catalog shop" in str(err) and warehouse.split("@")[-1] in str(err) and "not local" in str(err)
    with pytest.raises(ConfigError, match="not local"):
        CatalogConfig(type="hadoop", warehouse=warehouse)


def test_the_refused_warehouse_is_named_without_its_credentials(tmp_path):
    err = load_error(tmp_path, f"catalog:\n  warehouse: 's3a://AKIAFAKE:{SECRET}@bucket/wh?token={SECRET}'\n")
    assert "s3a://***@bucket/wh" in str(err) and SECRET not in str(err) and "AKIAFAKE" not in str(err)


@pytest.mark.parametrize("warehouse", ["/data/wh", "file:///data/wh", "file:/data/wh", "relative/wh", ""])
def test_a_local_hadoop_warehouse_loads(tmp_path, warehouse):
    assert load(tmp_path, f"catalog:\n  type: hadoop\n  warehouse: '{warehouse}'\n").catalog.type == "hadoop"


@pytest.mark.parametrize("type_", ["rest", "sql", "hive", "glue"])
def test_other_catalogs_take_any_warehouse(type_):
    assert CatalogConfig(type=type_, warehouse="s3a://bucket/wh").warehouse == "s3a://bucket/wh"


def test_the_readme_configuration_examples_load(tmp_path, monkeypatch):
    """The README's Configuration section shows YAML a user copies: each block loads."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Configuration\n"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(blocks) >= 2
    monkeypatch.setenv("REST_TOKEN", SECRET)
    monkeypatch.setenv("ICEBERG_DB_PASSWORD", SECRET)
    for block in blocks:
        assert isinstance(load(tmp_path, block), LakecleanerConfig)


def test_a_file_that_cannot_be_read_as_text_is_a_config_error(tmp_path):
    """Not a traceback: `config check` and every command exit 2 naming the file and why."""
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfecatalog: {}\n")
    with pytest.raises(ConfigError) as err:
        load_config(binary)
    assert err.value.prop == "<file>" and "not UTF-8 text" in str(err.value) and str(binary) in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)  # a directory
    assert err.value.prop == "<file>" and "cannot be read" in str(err.value)


def test_a_section_or_key_given_twice_is_a_mistake_not_the_last_one_winning(tmp_path):
    """YAML requires unique keys; PyYAML keeps the last silently: a second `catalog:` replaced the first."""
    err = load_error(tmp_path, "catalog:\n  name: lake\n  type: hadoop\ncatalog:\n  name: other\n")
    assert err.prop == "<file>" and "duplicate key 'catalog'" in str(err) and "line 4" in str(err)
    err = load_error(tmp_path, f"catalog:\n  properties:\n    token: {SECRET}\n    token: {SECRET}\n")
    assert "duplicate key 'token'" in str(err) and SECRET not in str(err)


def test_defaults_that_no_table_could_take_are_the_configs_error(tmp_path):
    """max.compaction.lag.ms below min.compaction.lag.ms in `defaults` passed `config check`, and then
    every table not overriding one of them was invalid; the one rule (resolve_table's) now runs at load."""
    err = load_error(tmp_path, "defaults:\n  min.compaction.lag.ms: 20\n  max.compaction.lag.ms: 10\n")
    assert err.prop == "defaults.max.compaction.lag.ms" and "must be >= min.compaction.lag.ms (20)" in str(err)
    err = load_error(tmp_path, "defaults:\n  max.compaction.lag.ms: 10\n  min.compaction.lag.ms: 10\n  bogus: 1\n")
    assert err.prop == "defaults.bogus"  # an equal pair is fine
