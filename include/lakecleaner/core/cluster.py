"""spark-submit in cluster deploy mode, where Spark has it: YARN and Kubernetes run the driver on the
cluster, so nothing of the submitting machine may be in the submission. No environment variables for
the driver's Python (the cluster's image or node says which Python runs it), no local paths: the code
is read from ``code_uri`` (``code_bundle`` writes what goes there), the config from ``config_uri`` or
handed over whole as an argument (``inline_config``, which must then hold no secret), the catalog
of a connection as its record with every secret a reference to the driver's environment
(catalog_connection.launch_record). Spark refuses cluster mode for Python applications on a
standalone master, and a local master has no cluster: both are refused here, saying so.

In cluster mode Spark hands its whole configuration to the driver (its JVM command line, a Kubernetes
ConfigMap, YARN's staging directory), so no secret goes in it: the driver gets them by the cluster's
own means (``spark.kubernetes.driver.secretKeyRef.*`` environment variables and mounted secrets on
Kubernetes, Hadoop credential providers and delegation tokens on YARN) and its config's ${NAME}s.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Mapping

from lakecleaner.core.catalog_connection import LAUNCH_KEY, is_secret_property, launch_record
from lakecleaner.core.config import RUNTIME_AUTO, CatalogProperties, LakecleanerConfig, inline_config, raw_config
from lakecleaner.core.sparkconf import JVM_OPTIONS, LOG4J_PROPERTIES, REDACTION_KEY, REFERENCE_KEYS, is_secret
from lakecleaner.core.submit import package_zip, submit_options

CODE_ZIP = "lakecleaner.zip"  # under code_uri: the package for --py-files (the driver's and the executors')
JOBS = ("clean.py", "forget.py", "compact.py", "maintain.py", "validate.py")  # under code_uri: the applications
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")
_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


class SubmitError(ValueError):
    """A submission that cannot work as configured; the message says what to change."""


@dataclass(frozen=True)
class SparkTarget:
    """Where spark-submit sends an application: the master and deploy mode of the Spark connection."""
    master: str
    deploy_mode: str | None = None

    @property
    def cluster(self) -> bool:
        return (self.deploy_mode or "client") == "cluster"

    def check(self) -> "SparkTarget":
        if self.deploy_mode not in (None, "client", "cluster"):
            raise SubmitError(f"deploy mode {self.deploy_mode!r}: must be client or cluster")
        if self.cluster and self.master.startswith("spark://"):
            raise SubmitError(f"Spark refuses cluster deploy mode for Python applications on a standalone master "
                              f"({self.master}): use client mode there (the driver runs inside the task's "
                              "spark-submit), or YARN or Kubernetes for cluster mode")
        if self.cluster and self.master.startswith("local"):
            raise SubmitError(f"a local master ({self.master}) has no cluster to deploy the driver to: use client mode")
        return self


def _is_remote(uri: str) -> bool:
    """A URI the cluster reads (local: names a file in the cluster's image or nodes), not this machine's."""
    scheme = _SCHEME.match(uri)
    return bool(scheme) and scheme.group(0).lower() != "file:"


def check_code_uri(code_uri: str | None) -> str:
    if not code_uri:
        raise SubmitError("cluster deploy mode needs code_uri: where the driver and executors read lakecleaner's "
                          f"code ({CODE_ZIP} and the job files that `lakecleaner code-bundle DIR` writes), e.g. "
                          "local:///opt/lakecleaner in the image, hdfs:///apps/lakecleaner/0.1.0 or "
                          "s3a://bucket/lakecleaner/0.1.0 ([lakecleaner] code_uri or lakecleaner_dag(code_uri=...))")
    if not _is_remote(code_uri):
        raise SubmitError(f"code_uri {code_uri}: a path of this worker, which a driver on the cluster cannot read; "
                          "give a URI the cluster reads (local:// for a path in its image, hdfs://, s3a://, https://)")
    return code_uri.rstrip("/")


def code_bundle(dest: str | Path) -> list[str]:
    """What ``code_uri`` must hold, written to ``dest``: the package zip and the job files. Copy the
    directory there (or into the driver's image). Returns the files written."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = [package_zip(dest)]
    for job in JOBS:
        written.append(str(shutil.copyfile(str(files("lakecleaner.spark.jobs") / job), dest / job)))
    return written


def _literal_secrets(doc: Mapping[str, Any]) -> list[str]:
    """Where the config's document writes a secret out rather than as a ${NAME} the driver reads from
    its environment: a property or setting whose name is a secret's (sparkconf.is_secret) with more
    than references (and separators) in its value, or whose value alone looks like one (a password in a URI, a
    password= parameter) without any reference in it."""
    found = []
    catalog = doc.get("catalog") or {}
    sections = [(f"catalog.{m}", catalog.get(m)) for m in ("properties", "spark_properties", "pyiceberg_properties")]
    sections.append(("spark.conf", (doc.get("spark") or {}).get("conf")))
    for where, section in sections:
        if not isinstance(section, Mapping):
            continue
        for key, value in section.items():
            if key == REDACTION_KEY or REFERENCE_KEYS.fullmatch(str(key)):
                continue
            value = str(value)
            bare = _REFERENCE.sub("", value)
            if is_secret(str(key), "") and re.search(r"[A-Za-z0-9]", bare):  # more than references and separators
                found.append(f"{where}.{key}")
            elif not is_secret(str(key), "") and bare == value and is_secret_property("", value):
                found.append(f"{where}.{key}")
    return found


def config_reference(cfg: LakecleanerConfig, config_uri: str | None) -> str:
    """The driver's --config: ``config_uri`` (a path or local:// or file:// URI in the driver's own file
    system, e.g. a mounted Kubernetes secret), else the worker's config handed over whole: its
    sections as written (${NAME}s for the driver's environment to resolve), without notifiers (the
    driver sends no alerts). A document with a secret written out in it is refused: it would be on
    the driver's command line and in the task's arguments."""
    if config_uri:
        if _is_remote(config_uri) and not config_uri.startswith("local:"):
            raise SubmitError(f"config_uri {config_uri}: the driver reads its config from its own file system: a "
                              "path, or a local:// or file:// URI (mount it: a Kubernetes secret through "
                              "spark.kubernetes.driver.secrets.<name>=<dir>, a file on every YARN node)")
        return config_uri
    doc = {k: v for k, v in raw_config(cfg.source).items() if k != "notifiers"}
    if cfg.catalog.type == "hadoop":  # a relative warehouse: as this worker resolved it
        doc["catalog"] = {**doc.get("catalog", {}), "warehouse": cfg.catalog.warehouse}
    secrets = _literal_secrets(doc)
    if secrets:
        raise SubmitError(f"cluster deploy mode hands the config to the driver inline, and {cfg.source} writes out "
                          f"secrets at {', '.join(secrets)}: write each as ${{NAME}} and give the driver NAME by the "
                          "cluster's means (spark.kubernetes.driver.secretKeyRef.NAME=<secret>:<key>), or set "
                          "config_uri to a config the driver reads from its own file system")
    return inline_config(doc)


def cluster_options(cfg: LakecleanerConfig, code_uri: str | None, job: str,
                    given: CatalogProperties | None = None) -> tuple[dict, list[str]]:
    """The SparkSubmitOperator arguments of ``job`` in cluster deploy mode (not its application
    arguments), and the environment variables the driver needs for the connection's secrets. The
    Spark conf is submit_conf's (no catalog, no secret), without the worker's log4j file; jars and
    packages must be URIs or Maven coordinates the cluster resolves."""
    code = check_code_uri(code_uri)
    options = submit_options(cfg, f"{code}/{CODE_ZIP}")
    if cfg.spark.iceberg_runtime == RUNTIME_AUTO:
        raise SubmitError("spark.iceberg_runtime: auto ships the Iceberg jar from this worker's disk, which a driver on "
                          "the cluster cannot read: set it to provided (the cluster's image or nodes have Iceberg) "
                          "or to a Maven coordinate")
    local = [j for j in (options.jars or "").split(",") if j and not _is_remote(j)]
    if local:
        raise SubmitError(f"spark.extra_jars {', '.join(local)}: paths of this worker; in cluster mode give URIs the "
                          "cluster reads (local:// in its image, hdfs://, s3a://, https://)")
    conf = dict(options.conf)
    java = conf.get("spark.driver.extraJavaOptions", "")
    if str(LOG4J_PROPERTIES) in java:  # the cleaner's default: the log4j file is this machine's
        conf["spark.driver.extraJavaOptions"] = JVM_OPTIONS
    needed = []
    if given is not None:
        conf[LAUNCH_KEY], needed = launch_record(given, cluster=True)
    return {"application": f"{code}/{job}", "py_files": options.py_files, "jars": options.jars,
            "packages": options.packages, "conf": conf, "deploy_mode": "cluster"}, needed
