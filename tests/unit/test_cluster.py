"""Cluster deploy mode's submission (lakecleaner.core.cluster) without Airflow: which masters take it,
the config handed over whole and read back, what counts as a secret written out, the code bundle.
(The commands the Spark provider's hook builds for each master: tests/airflow/test_submit_hook.py.)"""
from __future__ import annotations

import zipfile

import pytest

from lakecleaner.core import cluster
from lakecleaner.core.config import INLINE_PREFIX, inline_config, load_config
from lakecleaner.core.sparkconf import is_secret


@pytest.mark.parametrize("master, mode, ok", [
    ("local[2]", None, True), ("local[2]", "cluster", False), ("spark://m:7077", "client", True),
    ("spark://m:7077", "cluster", False), ("yarn", "cluster", True), ("k8s://https://k:6443", "cluster", True),
    ("yarn", "sideways", False)])
def test_cluster_mode_where_spark_has_it(master, mode, ok):
    target = cluster.SparkTarget(master, mode)
    if ok:
        assert target.check().cluster == (mode == "cluster")
    else:
        with pytest.raises(cluster.SubmitError):
            target.check()


def test_an_inline_config_reads_back_as_written(tmp_path, monkeypatch):
    doc = {"catalog": {"name": "lake", "type": "rest", "warehouse": "s3://b/w h#1?x=%41",
                       "properties": {"uri": "https://cat/api?a=b&c=d", "token": "${TOKEN}", "note": "$${literal} é€"}},
           "cleaner": {"threads": "${THREADS}"}}
    arg = inline_config(doc)
    assert arg.startswith(INLINE_PREFIX) and " " not in arg and "\n" not in arg
    monkeypatch.setenv("TOKEN", "tok")
    monkeypatch.setenv("THREADS", "3")
    cfg = load_config(arg)
    assert cfg.catalog.warehouse == "s3://b/w h#1?x=%41" and cfg.catalog.properties["token"] == "tok"
    assert cfg.catalog.properties["note"] == "${literal} é€" and cfg.cleaner.threads == 3
    assert cfg.source == "<inline config>"
    monkeypatch.delenv("TOKEN")
    with pytest.raises(Exception, match="environment variable TOKEN is not set"):
        load_config(arg)
    path = tmp_path / "lake.yaml"
    path.write_text("catalog: {name: x, type: hadoop, warehouse: /tmp/w}\n")
    assert load_config(f"local://{path}").catalog.name == load_config(f"file://{path}").catalog.name == "x"


@pytest.mark.parametrize("section, key, value, literal", [
    ("catalog.properties", "jdbc.password", "${PG_PASSWORD}", False),
    ("catalog.properties", "jdbc.password", "hunter2", True),
    ("catalog.properties", "credential", "${ID}:${SECRET}", False),
    ("catalog.properties", "credential", "client:${SECRET}", True),
    ("catalog.pyiceberg_properties", "uri", "postgresql+psycopg2://u:${PW}@db/x", False),
    ("catalog.pyiceberg_properties", "uri", "postgresql+psycopg2://u:hunter2@db/x", True),
    ("catalog.spark_properties", "uri", "jdbc:postgresql://db/x", False),
    ("spark.conf", "spark.hadoop.fs.s3a.secret.key", "${S3}", False),
    ("spark.conf", "spark.hadoop.fs.s3a.secret.key", "hunter2", True),
    ("spark.conf", "spark.executorEnv.URL", "jdbc:x://db/y?password=hunter2", True),
    ("spark.conf", "spark.kubernetes.driver.secretKeyRef.PG_PASSWORD", "pg:password", False),
    ("spark.conf", "spark.kubernetes.driver.secrets.lake-config", "/etc/lakecleaner", False),
    ("spark.conf", "spark.sql.shuffle.partitions", "8", False),
])
def test_a_secret_written_out_is_told_from_a_reference(section, key, value, literal):
    top, _, name = section.partition(".")
    doc = {top: {name: {key: value}}}
    assert cluster._literal_secrets(doc) == ([f"{section}.{key}"] if literal else [])


def test_references_to_secrets_reach_spark_submit():
    assert not is_secret("spark.kubernetes.driver.secretKeyRef.X", "pg:password")
    assert not is_secret("spark.kubernetes.executor.secrets.s3", "/mnt/s3")
    assert not is_secret("spark.hadoop.hadoop.security.credential.provider.path", "jceks://hdfs/keys.jceks")
    assert is_secret("spark.hadoop.fs.s3a.secret.key", "x") and is_secret("spark.kubernetes.driverEnv.X", "password=1")
    # S3A's SSE-C key, a password in an environment variable, an API key: secrets too
    assert is_secret("spark.hadoop.fs.s3a.encryption.key", "x") and is_secret("spark.executorEnv.DB_PASSWD", "x")
    assert is_secret("spark.sql.catalog.lake.header.x-api-key", "x") and is_secret("spark.hadoop.fs.gs.api.key", "x")
    assert not is_secret("spark.hadoop.fs.s3a.encryption.algorithm", "SSE-C")


def test_the_code_bundle_holds_the_zip_and_the_job_files(tmp_path):
    written = cluster.code_bundle(tmp_path / "bundle")
    assert sorted(p.rsplit("/", 1)[1] for p in written) == sorted([cluster.CODE_ZIP, *cluster.JOBS])
    with zipfile.ZipFile(tmp_path / "bundle" / cluster.CODE_ZIP) as zf:
        assert "lakecleaner/spark/batch.py" in zf.namelist()
    assert "job_main" in (tmp_path / "bundle" / "clean.py").read_text()
    with pytest.raises(cluster.SubmitError, match="needs code_uri"):
        cluster.check_code_uri(None)
    with pytest.raises(cluster.SubmitError, match="a path of this worker"):
        cluster.check_code_uri("file:///opt/lakecleaner")
    assert cluster.check_code_uri("hdfs:///apps/lakecleaner/") == "hdfs:///apps/lakecleaner"
