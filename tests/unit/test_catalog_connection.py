"""A catalog from a connection (lakecleaner.core.catalog_connection): the Iceberg provider's `iceberg`
connection type and this project's JDBC convention as a typed record merged over the YAML's catalog
section, and that record as a Spark driver receives it. No Airflow: the connection's fields are plain
values here (tests/airflow/test_catalog_connection_dag.py looks one up for real)."""
from __future__ import annotations

import json

import pytest

from lakecleaner.core import launch
from lakecleaner.core.catalog_connection import (LAUNCH_KEY, driver_env_name, from_connection, from_launch_record,
                                                 launch_record)
from lakecleaner.core.config import (CatalogConfig, CatalogProperties, ConfigError, LakecleanerConfig, SparkConfig,
                                     sql_alchemy_url)

YAML_CATALOG = CatalogConfig(name="lake", type="sql", warehouse="file:///old",
                             properties={"io-impl": "org.apache.iceberg.hadoop.HadoopFileIO"},
                             spark_properties={"uri": "jdbc:postgresql://old/x", "jdbc.schema-version": "V1"},
                             pyiceberg_properties={"uri": "postgresql+psycopg2://old/x", "echo": "false"})


def test_a_rest_connection_is_the_providers_host_oauth_client_and_extra():
    got = from_connection("cat", "https://cat.example.com/api/", "client", "s3cr3t",
                          {"warehouse": "s3://wh/", "s3.region": "eu-west-1", "scope": "PRINCIPAL_ROLE:ALL"})
    assert got == CatalogProperties(type="rest", warehouse="s3://wh/", properties={
        "s3.region": "eu-west-1", "scope": "PRINCIPAL_ROLE:ALL", "uri": "https://cat.example.com/api",
        "credential": "client:s3cr3t"})
    merged = got.over(CatalogConfig(name="lake", type="hadoop", warehouse="/tmp/wh"))
    assert merged.spark_conf()["spark.sql.catalog.lake.credential"] == "client:s3cr3t"
    assert merged.pyiceberg_properties_resolved()["credential"] == "client:s3cr3t"
    assert merged.name == "lake" and merged.type == "rest" and merged.warehouse == "s3://wh/"


def test_a_jdbc_catalog_by_the_projects_convention_reaches_both_engines():
    extra = {"type": "sql", "uri": "jdbc:postgresql://db:5432/iceberg?sslmode=require", "jdbc.user": "cleaner",
             "jdbc.password": "p@ss:w/rd", "warehouse": "s3://lake/wh"}
    got = from_connection("pg", None, None, None, extra)
    assert from_connection("pg", None, "cleaner", "p@ss:w/rd", {**extra, "type": "jdbc", "jdbc.user": "x",
                                                                 "jdbc.password": "y"}) == got  # login/password win
    merged = got.over(YAML_CATALOG)
    spark = merged.spark_conf()
    assert spark["spark.sql.catalog.lake.type"] == "jdbc"
    assert spark["spark.sql.catalog.lake.uri"] == extra["uri"]  # the connection's, over the file's spark-only uri
    assert spark["spark.sql.catalog.lake.jdbc.password"] == "p@ss:w/rd"
    assert spark["spark.sql.catalog.lake.jdbc.schema-version"] == "V1"  # the file's own property stays
    assert spark["spark.sql.catalog.lake.warehouse"] == "s3://lake/wh"
    pyiceberg = merged.pyiceberg_properties_resolved()
    assert pyiceberg["uri"] == "postgresql+psycopg2://cleaner:p%40ss%3Aw%2Frd@db:5432/iceberg?sslmode=require"
    assert pyiceberg["echo"] == "false" and pyiceberg["io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"


def test_pyiceberg_gets_a_sqlalchemy_url_for_postgresql_and_sqlite_and_is_told_otherwise():
    assert sql_alchemy_url("jdbc:postgresql://h/db", "u", None) == "postgresql+psycopg2://u@h/db"
    assert sql_alchemy_url("jdbc:sqlite:/var/lib/cat.db", None, None) == "sqlite:////var/lib/cat.db"
    with pytest.raises(ConfigError, match="give pyiceberg_properties.uri") as exc:
        CatalogConfig(name="l", type="sql", warehouse="file:///w", properties={
            "uri": "jdbc:mysql://h/db", "jdbc.password": "s3cr3t"}).pyiceberg_properties_resolved()
    assert "s3cr3t" not in str(exc.value)
    # a file that gives pyiceberg its own uri keeps it
    assert YAML_CATALOG.pyiceberg_properties_resolved()["uri"] == "postgresql+psycopg2://old/x"


@pytest.mark.parametrize("host, login, password, extra, field", [
    (None, "client", None, {}, "login/password"),  # a REST client needs both
    (None, "user", "s3cr3t", {"type": "glue"}, "login/password"),
    (None, None, None, {"type": "bogus", "token": "s3cr3t"}, "extra.type"),
    (None, None, None, {"spark_properties": "s3cr3t"}, "extra.spark_properties"),
    (None, None, None, {"token": {"nested": "s3cr3t"}}, "extra.properties.token"),
])
def test_a_wrong_connection_is_named_with_its_field_never_a_value(host, login, password, extra, field):
    with pytest.raises(ConfigError) as exc:
        from_connection("lake_catalog", host, login, password, extra)
    assert f"Airflow connection 'lake_catalog': {field}" in str(exc.value) and "s3cr3t" not in str(exc.value)


def test_a_hadoop_catalog_from_a_connection_must_still_be_local():
    with pytest.raises(ConfigError, match="is not local"):
        CatalogProperties(warehouse="s3://b/wh").over(CatalogConfig(name="l", type="hadoop", warehouse="/tmp/w"))


def test_the_config_with_a_connections_catalog_keeps_everything_else():
    cfg = LakecleanerConfig(catalog=YAML_CATALOG, spark=SparkConfig(driver_memory="3g"))
    assert cfg.with_catalog(None) is cfg
    merged = cfg.with_catalog(CatalogProperties(warehouse="file:///new"))
    assert merged.catalog.warehouse == "file:///new" and merged.state_root == "file:///new/_lakecleaner"
    assert merged.spark == cfg.spark and merged.catalog.spark_properties == YAML_CATALOG.spark_properties


def test_the_launch_record_round_trips_literally_in_client_mode():
    given = CatalogProperties(type="sql", properties={"uri": "jdbc:postgresql://db/x", "jdbc.password": "a${B}c"})
    text, needed = launch_record(given, cluster=False)
    assert needed == [] and from_launch_record(text, {}) == given  # a literal ${ stays literal


def test_in_cluster_mode_the_record_names_the_drivers_variables_instead_of_the_secrets():
    given = from_connection("pg", None, None, None, {
        "type": "sql", "uri": "jdbc:postgresql://db/x", "jdbc.user": "u", "jdbc.password": "s3cr3t",
        "s3.secret-access-key": "s3cr3t-too", "s3.endpoint": "http://minio:9000",
        "pyiceberg_properties": {"uri": "postgresql+psycopg2://u:s3cr3t@db/x"}})
    text, needed = launch_record(given, cluster=True)
    assert "s3cr3t" not in text and LAUNCH_KEY.startswith("spark.")
    assert needed == ["LAKECLEANER_CATALOG_JDBC_PASSWORD", "LAKECLEANER_CATALOG_S3_SECRET_ACCESS_KEY",
                      "LAKECLEANER_CATALOG_URI"]
    assert driver_env_name("jdbc.password") == "LAKECLEANER_CATALOG_JDBC_PASSWORD"
    env = {"LAKECLEANER_CATALOG_JDBC_PASSWORD": "s3cr3t", "LAKECLEANER_CATALOG_S3_SECRET_ACCESS_KEY": "s3cr3t-too",
           "LAKECLEANER_CATALOG_URI": "postgresql+psycopg2://u:s3cr3t@db/x"}
    assert from_launch_record(text, env) == given
    assert json.loads(text)["properties"]["s3.endpoint"] == "http://minio:9000"  # no secret: as it is
    with pytest.raises(ConfigError, match="environment variable LAKECLEANER_CATALOG_JDBC_PASSWORD is not set"):
        from_launch_record(text, {})


def test_the_private_conf_holds_the_catalog_the_secret_settings_and_the_record():
    given = CatalogProperties(properties={"jdbc.password": "s3cr3t"})
    cfg = LakecleanerConfig(catalog=YAML_CATALOG, spark=SparkConfig(conf={
        "spark.hadoop.fs.s3a.secret.key": "s3cr3t-key", "spark.sql.shuffle.partitions": "4"})).with_catalog(given)
    conf = launch.private_conf(cfg, given)
    assert conf["spark.sql.catalog.lake.jdbc.password"] == "s3cr3t"
    assert conf["spark.hadoop.fs.s3a.secret.key"] == "s3cr3t-key" and "spark.sql.shuffle.partitions" not in conf
    assert from_launch_record(conf[LAUNCH_KEY], {}) == given
    assert LAUNCH_KEY not in launch.private_conf(cfg)  # a catalog of the YAML alone: the job reads it there


def test_the_properties_file_is_private_holds_spark_defaults_first_and_is_removed(tmp_path, monkeypatch):
    import os
    import stat

    (tmp_path / "spark-defaults.conf").write_text("spark.eventLog.enabled  true\nspark.x  from-defaults")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    with launch.properties_file({"spark.x": "ours"}) as path:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        text = open(path).read()
        assert text.index("spark.eventLog.enabled") < text.index("spark.x=ours")  # ours come later, and win
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    with pytest.raises(ConfigError, match="spark.y: Spark trims") as exc:
        launch.java_properties({"spark.y": " s3cr3t "})
    assert "s3cr3t" not in str(exc.value)
    assert launch.java_properties({"a b=c": "x=y:z#!\\\n\tw"}) == "a\\ b\\=c=x\\=y\\:z\\#\\!\\\\\\n\\tw\n"
