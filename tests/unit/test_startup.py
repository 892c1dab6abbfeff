"""An application's driver imports the installed, byte-compiled pyspark of the zip's version instead
of Spark's pyspark.zip (lakecleaner.spark.startup); any doubt keeps spark-submit's path."""
import zipfile

import pytest

from lakecleaner.spark.startup import prefer_installed_pyspark


MODULES = ("pyspark/__init__.py", "pyspark/java_gateway.py", "pyspark/sql/session.py")


def _zip(tmp_path, version, name="pyspark.zip"):
    path = tmp_path / "spark" / name
    path.parent.mkdir(exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for module in MODULES:
            zf.writestr(module, "")
        zf.writestr("pyspark/sql/tests/test_session.py", "")  # pip's pyspark has no tests
        if version is not None:
            zf.writestr("pyspark/version.py", f'#\n__version__: str = "{version}"\n')
    return str(path)


def _installed(tmp_path, version, modules=MODULES):
    site = tmp_path / "site-packages"
    for module in modules:
        (site / module).parent.mkdir(parents=True, exist_ok=True)
        (site / module).write_text("")
    if version is not None:
        (site / "pyspark" / "version.py").write_text(f"__version__ = '{version}'\n")
    return str(site)


def test_the_zip_goes_after_the_installed_pyspark_of_its_version(tmp_path):
    pkg, bundled, py4j, site = "/x/lakecleaner.zip", _zip(tmp_path, "3.5.9"), "/x/py4j-0.10.9.7-src.zip", _installed(tmp_path, "3.5.9")
    path = [pkg, bundled, py4j, "/usr/lib/python311.zip", site]
    assert prefer_installed_pyspark(path) == bundled
    assert path == [pkg, py4j, "/usr/lib/python311.zip", site, bundled]


@pytest.mark.parametrize("installed,bundled", [("3.5.8", "3.5.9"), (None, "3.5.9"), ("3.5.9", None)],
                         ids=["other-version", "installed-says-none", "zip-says-none"])
def test_another_or_an_unknown_version_keeps_the_path(tmp_path, installed, bundled):
    path = [_zip(tmp_path, bundled), _installed(tmp_path, installed)]
    assert prefer_installed_pyspark(path) is None
    assert path == [str(tmp_path / "spark" / "pyspark.zip"), str(tmp_path / "site-packages")]


def test_an_installed_copy_without_a_module_of_the_zip_keeps_the_path(tmp_path):
    """A client-only package of the same version (no JVM gateway) is not the zip's pyspark."""
    path = [_zip(tmp_path, "3.5.9"), _installed(tmp_path, "3.5.9", modules=MODULES[::2])]
    assert prefer_installed_pyspark(path) is None and path[0].endswith("pyspark.zip")


def test_no_installed_pyspark_or_no_readable_zip_keeps_the_path(tmp_path):
    bundled = _zip(tmp_path, "3.5.9")
    path = [bundled, str(tmp_path)]
    assert prefer_installed_pyspark(path) is None and path == [bundled, str(tmp_path)]
    broken = tmp_path / "broken" / "pyspark.zip"
    broken.parent.mkdir()
    broken.write_bytes(b"not a zip")
    path = [str(broken), _installed(tmp_path, "3.5.9")]
    assert prefer_installed_pyspark(path) is None and path[0] == str(broken)
    path = [str(tmp_path / "gone" / "pyspark.zip"), _installed(tmp_path, "3.5.9")]
    assert prefer_installed_pyspark(path) is None and path[0].endswith("gone/pyspark.zip")
