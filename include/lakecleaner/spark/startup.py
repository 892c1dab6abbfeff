"""What an application's driver does before it first imports pyspark (each ``jobs/*.py`` entry).

spark-submit puts Spark's own ``python/lib/pyspark.zip`` first on the driver's ``sys.path``, and
Python caches no byte-code for a module imported from a zip: every application compiled the pyspark
modules it imports (those great_expectations pulls in too: pyspark.ml, pyspark.sql.connect) from
source again, about a second of CPU at each driver's start (benchmarks/HISTORY.md, "An
application's start"). Where the driver's Python has the same pyspark installed (pip's, compiled at
install; pip's pyspark is the one that ships spark-submit), the driver imports that copy instead;
the zip stays on the path after it. Another version, a copy without some module of the zip's (a
client-only package of the same version), or none leaves the path as spark-submit set it.
Executors are untouched (their Python workers are started by Spark, not by these entries)."""
from __future__ import annotations

import importlib.machinery
import os
import re
import sys
import zipfile

SPARK_PYTHON_ZIP = "pyspark.zip"
_VERSION = re.compile(r"""^__version__(?:\s*:\s*str)?\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def prefer_installed_pyspark(path: list[str] | None = None) -> str | None:
    """Move Spark's pyspark.zip after the installed pyspark of its version on ``path`` (default
    ``sys.path``); returns the zip moved, or None. Never imports pyspark; any doubt keeps the path."""
    path = sys.path if path is None else path
    if "pyspark" in sys.modules and path is sys.path:
        return None  # too late: the zip's copy is already the one in use
    zips = [p for p in path if os.path.basename(p) == SPARK_PYTHON_ZIP]
    if len(zips) != 1:
        return None
    spec = importlib.machinery.PathFinder.find_spec("pyspark", [p for p in path if p not in zips])
    if spec is None or not spec.submodule_search_locations:
        return None
    if not _same_pyspark(zips[0], spec.submodule_search_locations[0]):
        return None
    path.remove(zips[0])
    path.append(zips[0])
    return zips[0]


def _same_pyspark(bundle: str, installed: str) -> bool:
    """The installed copy says the zip's version and holds every module of it but its tests (pip's
    package leaves those out): a few milliseconds of reading the zip's directory."""
    root = os.path.dirname(installed)
    try:
        with zipfile.ZipFile(bundle) as zf:
            bundled = _version(zf.read("pyspark/version.py").decode())
            modules = [n for n in zf.namelist() if n.endswith(".py") and "/tests/" not in n]
        with open(os.path.join(installed, "version.py")) as f:
            own = _version(f.read())
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return False
    return (bundled is not None and own == bundled and all(n.startswith("pyspark/") for n in modules)
            and all(os.path.isfile(os.path.join(root, n)) for n in modules))


def _version(text: str) -> str | None:
    match = _VERSION.search(text)
    return match.group(1) if match else None
