"""A catalog's settings from a connection (the Apache Iceberg provider's ``iceberg`` connection type,
looked up by lakecleaner.airflow.catalog through whatever secrets backend the deployment uses), as
the typed record the core merges over the YAML's catalog section (config.CatalogProperties); and
that record as a Spark driver receives it (``launch_record``). Pure: the connection's fields come in
as plain values.

The provider's type is REST-oriented: host = the catalog URI, login/password = the OAuth client
(``credential`` = ``login:password``), extra = further catalog properties (both engines). This
project's convention adds, in the extra: ``type`` (rest when absent; sql, or Iceberg's jdbc, for a
JDBC catalog), ``warehouse``, and for a JDBC catalog its ``uri`` (the JDBC URL), ``jdbc.user`` and
``jdbc.password`` (Iceberg's own property names; login/password do the same); ``spark_properties``
and ``pyiceberg_properties`` objects for one engine only. pyiceberg gets a JDBC catalog's
SQLAlchemy URL built from the JDBC URL, user and password (config.sql_alchemy_url).
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from lakecleaner.core.config import CatalogProperties, ConfigError, _escaped, _interpolate
from lakecleaner.core.sparkconf import is_secret

# The Spark conf key carrying the record to the driver (lakecleaner.spark.session.job_config). Spark
# redacts it (sparkconf.REDACTION matches it); in client mode it travels in the submitting task's
# private properties file only, in cluster mode with every secret replaced by a reference to the
# driver's environment (DRIVER_ENV_PREFIX).
LAUNCH_KEY = "spark.lakecleaner.catalog.credentials"
DRIVER_ENV_PREFIX = "LAKECLEANER_CATALOG_"
_MAPS = ("properties", "spark_properties", "pyiceberg_properties")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def from_connection(conn_id: str, host: str | None, login: str | None, password: str | None,
                    extra: Mapping[str, Any] | None) -> CatalogProperties:
    """The catalog settings connection ``conn_id`` carries (see the module's doc). Every mistake is a
    ConfigError naming the connection and the field, never a value."""
    def wrong(field: str, problem: str) -> ConfigError:
        return ConfigError(None, f"Airflow connection {conn_id!r}: {field}", None, problem, hide_value=True)

    extra = dict(extra or {})
    kind = _text(extra.pop("type", "rest")).strip().lower()
    kind = "sql" if kind == "jdbc" else kind  # Iceberg's name for pyiceberg's sql catalog
    warehouse = extra.pop("warehouse", None)
    maps = {}
    for name in ("spark_properties", "pyiceberg_properties"):
        value = extra.pop(name, {})
        if not isinstance(value, Mapping):
            raise wrong(f"extra.{name}", "must be an object of catalog properties")
        maps[name] = dict(value)
    properties = dict(extra)
    if host:  # the provider's rule: the connection's own field over the extra's
        properties["uri"] = host.rstrip("/")
    if kind == "rest":
        if login and password:
            properties["credential"] = f"{login}:{password}"
        elif login or password:
            raise wrong("login/password", "a REST catalog's OAuth client needs both the client id (login) and "
                                          "the client secret (password)")
    elif kind == "sql":
        properties.update({k: v for k, v in (("jdbc.user", login), ("jdbc.password", password)) if v})
    elif login or password:
        raise wrong("login/password", f"a {kind} catalog takes its credentials in the extra (login and password "
                                      "are a REST catalog's OAuth client or a JDBC catalog's user and password)")
    try:
        return CatalogProperties(type=kind, warehouse=None if warehouse is None else _text(warehouse),
                                 properties=properties, **maps)
    except ConfigError as exc:
        raise wrong("extra." + exc.prop.removeprefix("catalog."), exc.problem) from None


def driver_env_name(key: str) -> str:
    """The driver's environment variable that carries the secret property ``key`` in cluster mode:
    jdbc.password -> LAKECLEANER_CATALOG_JDBC_PASSWORD."""
    return DRIVER_ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", key).upper()


def _has_password(value: str) -> bool:
    """A URI with a password in it (scheme://user:password@host)."""
    return bool(re.search(r"://[^/@\s]*:[^/@\s]+@", value))


def is_secret_property(key: str, value: str) -> bool:
    return is_secret(key, value) or _has_password(value)


def launch_record(given: CatalogProperties, *, cluster: bool) -> tuple[str, list[str]]:
    """``given`` as the driver reads it back (``from_launch_record``): its values literal (each ${
    written $${), or in cluster mode every secret one (is_secret_property) a ${...} reference to the
    driver's environment. Returns the record's text and the variables the driver needs."""
    doc = _escaped(given.as_dict())
    needed = []
    if cluster:
        for name in _MAPS:
            for key, value in given.as_dict()[name].items():
                if is_secret_property(key, value):
                    doc[name][key] = "${" + driver_env_name(key) + "}"
                    needed.append(driver_env_name(key))
    return json.dumps(doc, sort_keys=True, separators=(",", ":")), sorted(set(needed))


def from_launch_record(text: str, env: Mapping[str, str]) -> CatalogProperties:
    """The record ``launch_record`` wrote, its ${NAME} references read from ``env`` (the driver's)."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise ConfigError(None, LAUNCH_KEY, None, "not the JSON lakecleaner writes", hide_value=True) from None
    return CatalogProperties(**_interpolate(doc, "catalog", env, f"the Spark conf {LAUNCH_KEY}"))
