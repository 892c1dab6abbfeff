"""The spark-submit command Airflow builds from the DAG's SparkSubmitOperator arguments carries the
same Spark conf, jars and package as the one the CLI runs (both rendered by lakecleaner.core.submit).
Airflow's own operator and hook build the command; nothing is submitted.

In client deploy mode the package (--py-files) is built by the task that submits, in its own scratch
space, when it runs: the arguments evaluate hands the mapped task (XCom) name no file, since that task
may run on another machine, and nothing already on disk is trusted. In cluster deploy mode the code
comes from code_uri and the task builds nothing."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from submit_argv import argv_options, zip_content

from lakecleaner.core import submit
from lakecleaner.core.config import LakecleanerConfig, SparkConfig

pytestmark = pytest.mark.airflow


def _submitted(operator, monkeypatch, seen: dict):
    """Run ``operator.execute`` with the hook's submit replaced: the command it would run, and what
    the package's directory looked like while it ran."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    def submit_(hook, application):
        seen["argv"] = hook._build_spark_submit_command(application)
        package = Path(argv_options(seen["argv"])[0]["--py-files"].split(",")[-1])
        seen["package"], seen["content"] = package, zip_content(str(package))
        seen["mode"] = stat.S_IMODE(package.parent.stat().st_mode)

    monkeypatch.setattr(SparkSubmitHook, "submit", submit_)
    operator.execute({})


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """This task's own TMPDIR (tempfile reads it once: forget what it read)."""
    path = tmp_path / "task-scratch"
    path.mkdir()
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return path


def test_airflow_submits_what_the_cli_submits(tmp_path, scratch, monkeypatch):
    from lakecleaner.airflow.shipping import PackageShippingSparkSubmitOperator

    cfg = LakecleanerConfig(spark=SparkConfig(driver_memory="3g", conf={"spark.sql.shuffle.partitions": 4}))
    application = submit.job_path("clean.py")
    args = ["--config", "/etc/lakecleaner.yaml", "a.t"]
    kwargs = submit.operator_options(cfg)
    assert "py_files" not in kwargs  # evaluate's XCom names no file: the submitting task builds it
    operator = PackageShippingSparkSubmitOperator(task_id="clean", conn_id="spark_default", application=application,
                                                  name="a.t", application_args=args, **kwargs)
    seen = {}
    _submitted(operator, monkeypatch, seen)
    airflow_flags, airflow_conf, airflow_rest = argv_options(seen["argv"])
    cli_flags, cli_conf, cli_rest = argv_options(
        submit.submit_command(cfg, "/etc/lakecleaner.yaml", "clean.py", ["a.t"], str(tmp_path / "cli")))

    assert airflow_conf == cli_conf and airflow_conf["spark.driver.memory"] == "3g"
    assert airflow_flags["--jars"] == cli_flags["--jars"] and "--packages" not in airflow_flags
    assert seen["content"] == zip_content(cli_flags["--py-files"]) and airflow_flags["--py-files"] == str(seen["package"])
    assert airflow_rest == cli_rest == [application, *args]
    assert airflow_flags["--master"] == "local[2]"  # the connection's (tests/airflow/conftest.py), not the YAML's


# ---------------------------------------------------------------- each master, each deploy mode
CONNECTIONS = {
    "local": {"conn_type": "spark", "host": "local[2]"},
    "standalone": {"conn_type": "spark", "host": "spark://spark-master", "port": 7077},
    "standalone_cluster": {"conn_type": "spark", "host": "spark://spark-master", "port": 7077,
                           "extra": {"deploy-mode": "cluster"}},
    "yarn_cluster": {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "etl"}},
    "k8s_cluster": {"conn_type": "spark", "host": "k8s://https://k8s.example.com:6443",
                    "extra": {"deploy-mode": "cluster", "namespace": "lakes"}},
}
CODE_URI = "local:///opt/lakecleaner/0.1.0"
SECRET = "s3cr3t-from-the-connection"


@pytest.fixture
def submission(tmp_path, monkeypatch):
    """A config for either mode (a Maven Iceberg runtime, a JDBC driver the cluster reads, its secrets
    as ${NAME}s, the Kubernetes secrets they come from), a catalog connection holding the password,
    and the Spark connections; returns a function building (the hook's command, the hook, the
    submission's arguments) for one of them."""
    import json

    import airflow.providers.apache.spark.hooks.spark_submit as spark_submit

    monkeypatch.setattr(spark_submit, "kube_client", object(), raising=False)  # the cncf provider's, not installed here
    config = tmp_path / "lake.yaml"
    config.write_text(
        "catalog:\n  name: lake\n  type: sql\n  spark_properties: {jdbc.schema-version: V1}\n"
        "spark:\n  iceberg_runtime: org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2\n"
        "  extra_jars: [local:///opt/spark/jars/postgresql.jar]\n  conf:\n"
        "    spark.kubernetes.container.image: registry.example.com/lakecleaner-spark:0.1.0\n"
        "    spark.kubernetes.driver.secretKeyRef.LAKECLEANER_CATALOG_JDBC_PASSWORD: iceberg-db:password\n"
        "    spark.kubernetes.driver.secretKeyRef.S3_SECRET: lake-s3:secret-key\n"
        "    spark.hadoop.fs.s3a.secret.key: ${S3_SECRET}\n")
    monkeypatch.setenv("S3_SECRET", "s3cr3t-s3-on-the-worker")
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_CATALOG", json.dumps({"conn_type": "iceberg", "extra": {
        "type": "sql", "uri": "jdbc:postgresql://db:5432/iceberg", "jdbc.user": "cleaner", "jdbc.password": SECRET,
        "warehouse": "s3a://lake/wh"}}))
    for name, conn in CONNECTIONS.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_SPARK_{name.upper()}", json.dumps(conn))

    def build(name: str, config_uri: str | None = None):
        from lakecleaner.airflow.dag import _submission, catalog_and_config
        from lakecleaner.airflow.operators import LakecleanerSubmitOperator

        given, cfg = catalog_and_config(str(config), "lake_catalog")
        options, config_arg = _submission(cfg, given, "clean.py", f"spark_{name}", CODE_URI, config_uri)
        operator = LakecleanerSubmitOperator(task_id="clean", conn_id=f"spark_{name}", name="a.t",
                                             application_args=["--config", config_arg, "a.t"], **options,
                                             lakecleaner_config=str(config), catalog_conn_id="lake_catalog")
        hook = operator._get_hook()
        return hook._build_spark_submit_command(options["application"]), hook, options

    build.config = str(config)
    return build


@pytest.mark.parametrize("name, master", [("local", "local[2]"), ("standalone", "spark://spark-master:7077")])
def test_client_mode_runs_the_driver_in_the_task_with_this_workers_python_and_files(submission, name, master):
    built, hook, options = submission(name)
    flags, conf, rest = argv_options(built)
    assert flags["--master"] == master and flags["--deploy-mode"] == "client"
    # no package named by the arguments (XCom): the submitting task builds it when it runs (below)
    assert "py_files" not in options and "--py-files" not in flags
    assert rest[0] == submit.job_path("clean.py") and rest[1:3] == ["--config", rest[2]] and rest[2].endswith("lake.yaml")
    assert options["env_vars"]["PYSPARK_PYTHON"] and hook._env == options["env_vars"]  # spark-submit's own env
    assert "spark.sql.catalog.lake" not in conf and "spark.hadoop.fs.s3a.secret.key" not in conf
    assert "s3cr3t" not in " ".join(built)
    # the secretKeyRefs name Kubernetes secrets (no use here, no secret either): they stay
    assert conf["spark.kubernetes.driver.secretKeyRef.S3_SECRET"] == "lake-s3:secret-key"


def test_the_config_is_named_as_mounted_not_through_its_symlinks(submission, tmp_path):
    """A Kubernetes ConfigMap or Secret volume (the README's Helm values mount the config so) holds
    each file as a symlink through ..data into a directory named for the pod's mount time, which
    another pod's mount names otherwise: the mapped task, maybe on another pod, gets the path as
    mounted."""
    from lakecleaner.airflow.dag import _submission, catalog_and_config

    mount = tmp_path / "mount"
    real = mount / "..2026_11_29_09_00_00.123456789"
    real.mkdir(parents=True)
    (real / "lake.yaml").write_text(Path(submission.config).read_text())
    (mount / "..data").symlink_to(real.name)
    (mount / "lake.yaml").symlink_to("..data/lake.yaml")
    given, cfg = catalog_and_config(str(mount / "lake.yaml"), "lake_catalog")
    _, config_arg = _submission(cfg, given, "clean.py", "spark_local", None, None)
    assert config_arg == str(mount / "lake.yaml")


@pytest.mark.parametrize("name", ["yarn_cluster", "k8s_cluster"])
def test_cluster_mode_names_only_what_the_cluster_reads(submission, name, monkeypatch):
    from lakecleaner.core.catalog_connection import LAUNCH_KEY
    from lakecleaner.spark.session import job_config

    built, hook, options = submission(name)
    flags, conf, rest = argv_options(built)
    assert flags["--deploy-mode"] == "cluster"
    assert flags["--master"] == {"yarn_cluster": "yarn", "k8s_cluster": "k8s://https://k8s.example.com:6443"}[name]
    # the code: from code_uri; the runtime and the JDBC driver: what the cluster resolves
    assert flags["--py-files"] == f"{CODE_URI}/lakecleaner.zip" and rest[0] == f"{CODE_URI}/clean.py"
    assert flags["--packages"] == "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
    assert flags["--jars"] == "local:///opt/spark/jars/postgresql.jar"
    # nothing of this worker: no environment for the driver, no path of this machine, no log4j file of it
    assert "env_vars" not in options and hook._env is None
    assert not [k for k in conf if "PYSPARK_PYTHON" in k or k.startswith(("spark.yarn.appMasterEnv.",
                                                                           "spark.kubernetes.driverEnv."))]
    assert not [a for a in built if "/work/" in a or "site-packages" in a or "/tmp/" in a], built
    assert "log4j2.configurationFile" not in conf["spark.driver.extraJavaOptions"]
    if name == "yarn_cluster":
        assert flags["--queue"] == "etl"
    else:
        assert conf["spark.kubernetes.namespace"] == "lakes"
    # no secret: neither the connection's password nor the worker's ${S3_SECRET}; the driver's come
    # from Kubernetes secrets, named by the config
    assert "s3cr3t" not in " ".join(built) and "spark.hadoop.fs.s3a.secret.key" not in conf
    assert conf["spark.kubernetes.driver.secretKeyRef.LAKECLEANER_CATALOG_JDBC_PASSWORD"] == "iceberg-db:password"
    assert "${LAKECLEANER_CATALOG_JDBC_PASSWORD}" in conf[LAUNCH_KEY]
    # the config goes whole, as written: the driver resolves its ${NAME}s and the connection's record
    assert rest[1] == "--config" and rest[2].startswith("data:application/json,") and rest[3:] == ["a.t"]
    monkeypatch.setenv("LAKECLEANER_CATALOG_JDBC_PASSWORD", "s3cr3t-from-the-k8s-secret")
    monkeypatch.setenv("S3_SECRET", "s3cr3t-s3-in-the-driver")
    driver = job_config(rest[2], {LAUNCH_KEY: conf[LAUNCH_KEY]})
    assert driver.catalog.spark_conf()["spark.sql.catalog.lake.jdbc.password"] == "s3cr3t-from-the-k8s-secret"
    assert driver.catalog.warehouse == "s3a://lake/wh" and driver.state_root == "s3a://lake/wh/_lakecleaner"
    assert driver.spark.conf["spark.hadoop.fs.s3a.secret.key"] == "s3cr3t-s3-in-the-driver"


def test_cluster_mode_with_the_config_at_a_uri_of_the_drivers(submission):
    built, _, _ = submission("k8s_cluster", config_uri="local:///etc/lakecleaner/lake.yaml")
    assert argv_options(built)[2][1:3] == ["--config", "local:///etc/lakecleaner/lake.yaml"]


def test_what_cannot_work_is_refused_before_anything_is_submitted(submission, tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="Spark refuses cluster deploy mode for Python applications on a "
                                                   "standalone master"):
        submission("standalone_cluster")
    with pytest.raises(AirflowFailException, match="config_uri s3a://b/lake.yaml: the driver reads its config from "
                                                   "its own file system"):
        submission("k8s_cluster", config_uri="s3a://b/lake.yaml")
    config = tmp_path / "lake.yaml"
    config.write_text(config.read_text().replace("${S3_SECRET}", "s3cr3t-written-out"))
    with pytest.raises(AirflowFailException, match=r"writes out secrets at spark.conf.spark.hadoop.fs.s3a.secret.key: "
                                                   r"write each as \$\{NAME\}") as exc:
        submission("yarn_cluster")
    assert "s3cr3t" not in str(exc.value)
    config.write_text(config.read_text().replace("iceberg_runtime: org.apache.iceberg:iceberg-spark-runtime-3.5_2.12"
                                                 ":1.10.2", "iceberg_runtime: auto"))
    with pytest.raises(AirflowFailException, match="spark.iceberg_runtime: auto ships the Iceberg jar from this "
                                                   "worker's disk"):
        submission("yarn_cluster", config_uri="local:///etc/lake.yaml")
    monkeypatch.setenv("AIRFLOW__LAKECLEANER__CODE_URI", "")
    from lakecleaner.airflow.dag import _submission, catalog_and_config

    given, cfg = catalog_and_config(str(config), "lake_catalog")
    with pytest.raises(AirflowFailException, match="cluster deploy mode needs code_uri"):
        _submission(cfg, given, "clean.py", "spark_k8s_cluster", None, None)
    with pytest.raises(AirflowFailException, match="code_uri /opt/lakecleaner: a path of this worker"):
        _submission(cfg, given, "clean.py", "spark_k8s_cluster", "/opt/lakecleaner", None)


def test_the_private_properties_file_and_the_package_exist_for_the_client_mode_submission_only(
        submission, scratch, monkeypatch):
    """execute(): in client mode the catalog (the connection's password with it) and the secret
    settings are in a 0600 file, and the package the task built is in a 0700 directory of its own
    scratch space, while spark-submit runs, both gone after; in cluster mode there is neither (the
    code comes from code_uri)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from lakecleaner.airflow.operators import LakecleanerSubmitOperator

    seen = {}

    def submit(hook, application="", **kwargs):
        path = hook._properties_file
        seen["file"] = (path, os.stat(path).st_mode & 0o777, open(path).read()) if path else None
        seen["cmd"] = hook._build_spark_submit_command(application)
        seen["py_files"] = argv_options(seen["cmd"])[0].get("--py-files")
        seen["scratch"] = sorted(os.listdir(scratch))
        local = Path(seen["py_files"]) if seen["py_files"].startswith("/") else None
        seen["package"] = (stat.S_IMODE(local.parent.stat().st_mode), zip_content(str(local))) if local else None

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    for name in ("local", "k8s_cluster"):
        _, _, options = submission(name)
        operator = LakecleanerSubmitOperator(task_id="clean", conn_id=f"spark_{name}", name="a.t",
                                             application_args=["a.t"], **options,
                                             lakecleaner_config=submission.config, catalog_conn_id="lake_catalog")
        seen.clear()
        operator.execute({})
        if name == "local":
            path, mode, text = seen["file"]
            assert mode == 0o600 and SECRET in text and "s3cr3t-s3-on-the-worker" in text
            assert "spark.sql.catalog.lake.jdbc.password" in text and not os.path.exists(path)
            assert "--properties-file" in seen["cmd"] and operator.properties_file is None
            package = Path(seen["py_files"])  # built by this task, in its own scratch space
            assert package.is_relative_to(scratch) and package.name == "lakecleaner.zip"
            mode, content = seen["package"]
            assert mode == 0o700 and "lakecleaner/spark/jobs/clean.py" in content
            assert len(seen["scratch"]) == 2  # the properties file's directory and the package's
            assert not package.parent.exists() and operator.py_files is None  # gone with the submission
        else:
            assert seen["file"] is None and "--properties-file" not in seen["cmd"]
            assert seen["py_files"] == f"{CODE_URI}/lakecleaner.zip" and seen["scratch"] == []  # nothing built
            assert seen["package"] is None and operator.py_files == f"{CODE_URI}/lakecleaner.zip"
        assert not [a for a in seen["cmd"] if "s3cr3t" in a]
        assert os.listdir(scratch) == []  # nothing left behind


def test_the_submitting_task_builds_the_package_in_its_own_scratch_space(scratch, monkeypatch):
    """Built while the task runs, in a private directory (0700) of the task's own TMPDIR, removed
    when spark-submit returns; a zip planted where earlier versions kept theirs is not looked at."""
    from lakecleaner.airflow.shipping import PackageShippingSparkSubmitOperator

    monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    planted = Path(tempfile.gettempdir()) / "lakecleaner"
    planted.mkdir()
    for name in ("lakecleaner.zip", "lakecleaner-0000000000000000.zip"):
        (planted / name).write_bytes(b"not the package")
    operator = PackageShippingSparkSubmitOperator(task_id="clean", conn_id="spark_default",
                                                  application=submit.job_path("clean.py"), py_files="/opt/extra.py",
                                                  **submit.operator_options(LakecleanerConfig()))
    seen = {}
    _submitted(operator, monkeypatch, seen)
    assert seen["package"].is_relative_to(scratch) and seen["package"].parent != planted
    assert seen["mode"] == 0o700
    assert "lakecleaner/core/scheduler.py" in seen["content"] and "lakecleaner/spark/jobs/clean.py" in seen["content"]
    assert not [n for n in seen["content"] if n.startswith("lakecleaner/airflow/")]
    assert operator.py_files == "/opt/extra.py"  # the operator's own files are kept (the package's path goes)
    assert not seen["package"].parent.exists()  # gone with the task
    assert sorted(os.listdir(scratch)) == ["lakecleaner"]  # only what was planted


def test_the_dag_hands_its_mapped_tasks_no_package_path(tmp_path, monkeypatch):
    """What evaluate returns in client mode (the mapped tasks' arguments, XCom; forget_requests builds
    its own through the same _submission) names no package, and no file of the machine it ran on but
    the deployment's config and job."""
    import datetime as dt
    from types import SimpleNamespace

    from lakecleaner.airflow import dag as dag_module
    from lakecleaner.core.scheduler import Application, Job

    config = tmp_path / "lake.yaml"
    config.write_text(f"catalog:\n  name: lake\n  type: hadoop\n  warehouse: {tmp_path / 'wh'}\n")
    given, cfg = dag_module.catalog_and_config(str(config))
    now = dt.datetime(2026, 11, 26, tzinfo=dt.timezone.utc)
    context = {"dag_run": SimpleNamespace(run_id="manual__x", run_after=now), "logical_date": now,
               "data_interval_start": now, "data_interval_end": now}
    apps = [Application(0, (Job("a.t", 1, "dirty"),))]
    shared, config_arg = dag_module._submission(cfg, given, "clean.py", "spark_default", None, None)
    assert shared["deploy_mode"] == "client" and config_arg == str(config.resolve())
    kwargs = dag_module._application_kwargs(cfg, apps, 1, None, {"dry_run": False}, context, shared, config_arg)
    assert kwargs and all("py_files" not in k for k in kwargs)
    assert str(tmp_path) not in repr(kwargs).replace(str(config.resolve()), "")
