"""Each catalog type the config accepts installs with the package: hadoop and rest need nothing
beyond pyiceberg's own dependencies, sql, hive and glue have an extra of the package that passes
through pyiceberg's extra of the same name (pip install 'lakecleaner[glue]')."""
from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from lakecleaner.core.config import CATALOG_TYPES

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# What each catalog type needs installed beyond the core's pyiceberg[pyarrow]. hadoop: the metadata
# reader opens the tables' metadata files (StaticTable); rest: pyiceberg's RestCatalog speaks HTTP
# through requests, an unconditional dependency of pyiceberg (SigV4 signing would need its
# rest-sigv4 extra, boto3); sql: SQLAlchemy and a driver, one extra per database.
CATALOG_EXTRAS = {"hadoop": (), "rest": (), "sql": ("sql-postgres", "sql-sqlite"), "hive": ("hive",),
                  "glue": ("glue",)}


def project() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["project"]


def test_every_catalog_type_is_decided():
    assert set(CATALOG_EXTRAS) == set(CATALOG_TYPES)


def test_each_extra_passes_through_pyicebergs_of_the_same_name_and_version_range():
    core = next(Requirement(r) for r in project()["dependencies"] if Requirement(r).name == "pyiceberg")
    extras = project()["optional-dependencies"]
    for catalog, names in CATALOG_EXTRAS.items():
        for name in names:
            (req,) = [Requirement(r) for r in extras[name] if Requirement(r).name == "pyiceberg"]
            assert req.extras == {name} and req.specifier == core.specifier, (catalog, name, str(req))


def test_rest_needs_nothing_beyond_pyicebergs_own_dependencies():
    unconditional = {Requirement(r).name for r in importlib.metadata.requires("pyiceberg")
                     if Requirement(r).marker is None}
    assert "requests" in unconditional  # pyiceberg.catalog.rest's HTTP client; the rest it imports is core
