"""What a client-mode Spark application gets through a private ``--properties-file`` rather than its
command line: the catalog's Spark conf (which may hold credentials), every secret setting of
``spark.conf`` (submit.secret_conf) and, when the catalog came from a connection, its record for the
driver's own code (catalog_connection.LAUNCH_KEY). The DAG's submitting task writes the file, 0600 in
a private directory, for the one spark-submit it runs, and removes it after
(lakecleaner.airflow.operators); argv, XCom, the rendered fields and the logs carry none of it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Mapping

from lakecleaner.core.catalog_connection import LAUNCH_KEY, launch_record
from lakecleaner.core.config import CatalogProperties, ConfigError, LakecleanerConfig
from lakecleaner.core.submit import secret_conf


def private_conf(cfg: LakecleanerConfig, given: CatalogProperties | None = None) -> dict[str, str]:
    """The settings a client-mode application gets from the properties file: ``cfg``'s catalog (the
    connection's ``given`` already merged over it) as Spark's spark.sql.catalog.<name>.*, the secret
    settings of spark.conf, and the record of ``given`` the driver merges over its YAML."""
    conf = {**cfg.catalog.spark_conf(), **secret_conf(cfg)}
    if given is not None:
        conf[LAUNCH_KEY] = launch_record(given, cluster=False)[0]
    return conf


def _escape(text: str, key: bool) -> str:
    """``text`` as java.util.Properties reads it back (Spark reads the file as UTF-8)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[ch])
        elif ch in "=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def java_properties(conf: Mapping[str, str]) -> str:
    """``conf`` in the properties file format. Spark trims each value it reads, so a value with
    leading or trailing blanks would arrive changed: refused, naming its key only."""
    for key, value in conf.items():
        if str(value) != str(value).strip():
            raise ConfigError(None, key, None, "Spark trims the blanks around a value read from a properties file; "
                                               "this one starts or ends with blanks", hide_value=True)
    return "".join(f"{_escape(k, True)}={_escape(str(v), False)}\n" for k, v in conf.items())


def spark_defaults() -> str:
    """The text of the spark-defaults.conf spark-submit would read without --properties-file (Spark 3.5
    reads one or the other): $SPARK_CONF_DIR's, else $SPARK_HOME/conf's, else the conf directory of the
    Spark whose spark-submit is on PATH. Empty when there is none."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = os.environ.get("SPARK_HOME")
        binary = shutil.which("spark-submit")
        if not home and binary:
            home = str(Path(binary).resolve().parents[1])
        conf_dir = os.path.join(home, "conf") if home else None
    path = Path(conf_dir, "spark-defaults.conf") if conf_dir else None
    return path.read_text(encoding="utf-8") if path is not None and path.is_file() else ""


@contextlib.contextmanager
def properties_file(conf: Mapping[str, str]) -> Iterator[str]:
    """A --properties-file holding spark-defaults.conf (which it replaces for spark-submit) and then
    ``conf`` (a later key wins), readable by this user only (0600, in a 0700 directory of its own),
    removed when the block ends."""
    text = spark_defaults()
    text = (text + ("\n" if text and not text.endswith("\n") else "")) + java_properties(conf)
    directory = tempfile.mkdtemp(prefix="lakecleaner-submit-")  # 0700
    path = os.path.join(directory, "spark.properties")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)
