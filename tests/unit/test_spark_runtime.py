"""Where the Iceberg runtime comes from (spark.iceberg_runtime: auto, a Maven coordinate, or
provided by the cluster) and what a deployment adds to it (spark.extra_jars, spark.extra_packages),
as the session's conf (lakecleaner.core.sparkconf) and as spark-submit's --jars/--packages
(lakecleaner.core.submit). Pure: no Spark is started."""
from __future__ import annotations

import pytest
import yaml
from submit_argv import argv_options

from lakecleaner.core import sparkconf, submit
from lakecleaner.core.config import CONFIG_ENV, ConfigError, LakecleanerConfig, SparkConfig, config_document, load_config

COORDINATE = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
AWS = "org.apache.iceberg:iceberg-aws-bundle:1.10.2"
PG_JAR = "/usr/share/java/postgresql.jar"
SECRET = "FAKE-S3CR3T-c0ffee-4711"


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch):
    monkeypatch.delenv(CONFIG_ENV, raising=False)


def jars_and_packages(spark: SparkConfig) -> tuple[str | None, str | None]:
    conf = sparkconf.spark_conf(LakecleanerConfig(spark=spark))
    return conf.get("spark.jars"), conf.get("spark.jars.packages")


def test_auto_is_the_pinned_packages_jar_and_extras_join_it():
    runtime = sparkconf.iceberg_runtime_jar()
    assert jars_and_packages(SparkConfig()) == (runtime, None)
    assert jars_and_packages(SparkConfig(extra_jars=(PG_JAR, "/opt/x.jar"))) == (f"{runtime},{PG_JAR},/opt/x.jar",
                                                                                  None)
    assert jars_and_packages(SparkConfig(extra_packages=(AWS,))) == (runtime, AWS)


def test_a_maven_coordinate_is_a_package_and_extras_join_it():
    assert jars_and_packages(SparkConfig(iceberg_runtime=COORDINATE)) == (None, COORDINATE)
    assert jars_and_packages(SparkConfig(iceberg_runtime=COORDINATE, extra_jars=(PG_JAR,),
                                         extra_packages=(AWS,))) == (PG_JAR, f"{COORDINATE},{AWS}")


def test_provided_adds_no_iceberg_jar_nor_package(monkeypatch):
    def no_lookup():
        raise AssertionError("provided must not look for the pinned package's jar")

    monkeypatch.setattr(sparkconf, "iceberg_runtime_jar", no_lookup)
    assert jars_and_packages(SparkConfig(iceberg_runtime="provided")) == (None, None)
    assert jars_and_packages(SparkConfig(iceberg_runtime="provided", extra_jars=(PG_JAR,),
                                         extra_packages=(AWS,))) == (PG_JAR, AWS)
    conf = sparkconf.spark_conf(LakecleanerConfig(spark=SparkConfig(iceberg_runtime="provided")))
    assert conf["spark.sql.extensions"] == sparkconf.EXTENSIONS  # the cluster's Iceberg still needs them


@pytest.mark.parametrize("spark", [
    SparkConfig(extra_jars=(PG_JAR,), extra_packages=(AWS,)),
    SparkConfig(iceberg_runtime=COORDINATE, extra_jars=(PG_JAR,)),
    SparkConfig(iceberg_runtime="provided", extra_packages=(AWS,)),
    SparkConfig(iceberg_runtime="provided"),
])
def test_spark_submit_gets_them_as_jars_and_packages(spark, tmp_path):
    cfg = LakecleanerConfig(spark=spark)
    jars, packages = jars_and_packages(spark)
    options = submit.submit_options(cfg, "pkg.zip")
    assert (options.jars, options.packages) == (jars, packages)
    assert not {"spark.jars", "spark.jars.packages"} & set(options.conf)
    flags, conf, _ = argv_options(submit.submit_command(cfg, "/etc/l.yaml", "clean.py", ["a.t"], str(tmp_path)))
    assert (flags.get("--jars"), flags.get("--packages")) == (jars, packages)
    assert options.operator_kwargs()["jars"] == jars and options.operator_kwargs()["packages"] == packages


@pytest.mark.parametrize("key, instead", [("spark.jars", "spark.extra_jars"),
                                          ("spark.jars.packages", "spark.extra_packages")])
def test_spark_jars_in_spark_conf_is_refused_pointing_at_the_extras(tmp_path, key, instead):
    """spark.conf's spark.jars replaced the Iceberg runtime's jar instead of joining it."""
    path = tmp_path / "c.yaml"
    path.write_text(f"spark:\n  conf: {{{key}: '/a.jar,{SECRET}'}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.prop == f"spark.conf.{key}" and instead in str(err.value) and SECRET not in str(err.value)
    with pytest.raises(ConfigError, match=instead):
        SparkConfig(conf={key: "/a.jar"})


def test_the_runtime_options_load_from_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"spark:\n  iceberg_runtime: provided\n  extra_jars: [{PG_JAR}]\n  extra_packages: [{AWS}]\n")
    spark = load_config(path).spark
    assert (spark.iceberg_runtime, spark.extra_jars, spark.extra_packages) == ("provided", (PG_JAR,), (AWS,))


@pytest.mark.parametrize("text, path, problem", [
    (f"spark:\n  extra_jars: {PG_JAR}\n", "spark.extra_jars", "expected a list, got a string"),
    ("spark:\n  extra_jars: ['/a.jar,/b.jar']\n", "spark.extra_jars[0]", "one jar per entry"),
    ("spark:\n  extra_jars: ['']\n", "spark.extra_jars[0]", "one jar per entry"),
    ("spark:\n  extra_packages: [postgresql]\n", "spark.extra_packages[0]", "group:artifact:version"),
    ("spark:\n  iceberg_runtime: cluster\n", "spark.iceberg_runtime", "auto, provided or a Maven coordinate"),
])
def test_malformed_runtime_options(tmp_path, text, path, problem):
    file = tmp_path / "c.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(file)
    assert err.value.prop == path and problem in str(err.value)


def test_a_config_document_carries_the_runtime_options(tmp_path):
    cfg = LakecleanerConfig(spark=SparkConfig(iceberg_runtime="provided", extra_jars=(PG_JAR,),
                                              extra_packages=(AWS,)))
    path = tmp_path / "doc.yaml"
    path.write_text(yaml.safe_dump(config_document(cfg)))
    assert load_config(path).spark == cfg.spark
