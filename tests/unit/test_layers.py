"""The package by layer: the core imports neither Spark nor Airflow, the Spark side never imports
Airflow, and nothing installed imports the development tools. Checked on every import statement (at
module level or inside a function), and once by importing the core in a fresh interpreter."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "include" / "lakecleaner"
FORBIDDEN = {
    "core": ("pyspark", "airflow", "great_expectations", "lakecleaner.spark", "lakecleaner.airflow", "lakecleaner.cli"),
    "spark": ("airflow", "lakecleaner.airflow", "lakecleaner.cli"),
    "airflow": ("lakecleaner.cli",),
}


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in ``path`` names, relative imports resolved."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            out |= {module} | ({f"{module}.{a.name}" for a in node.names} if node.level else set())
    return out


def _offending(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in forbidden))


def test_each_layer_imports_only_what_is_below_it():
    wrong = {}
    for layer, forbidden in FORBIDDEN.items():
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            if bad := _offending(path, forbidden):
                wrong[str(path.relative_to(PACKAGE))] = bad
    assert wrong == {}


def test_nothing_installed_imports_the_development_tools():
    wrong = {str(p.relative_to(PACKAGE)): bad for p in sorted(PACKAGE.rglob("*.py"))
             if (bad := _offending(p, ("lakecleaner_dev",)))}
    assert wrong == {}


def test_the_layer_check_sees_imports_inside_functions(tmp_path):
    """The check itself can fail: an import hidden in a function body is found."""
    module = PACKAGE / "core" / "config.py"
    assert "lakecleaner.core.config" not in imported_modules(module)  # a module does not import itself
    sample = tmp_path / "x.py"
    sample.write_text("def f():\n    from pyspark.sql import functions as F\n    import airflow.sdk\n")
    found = set()
    for node in ast.walk(ast.parse(sample.read_text())):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {getattr(node, "module", None) or node.names[0].name}
    assert found == {"pyspark.sql", "airflow.sdk"}


def test_the_core_and_the_cli_load_without_spark_or_airflow():
    """What the core's dependencies alone run: `lakecleaner evaluate` and `plan` on a machine without the
    spark extra; the CLI imports a Spark-side module only inside the command that needs it."""
    modules = sorted(f"lakecleaner.core.{p.stem}" for p in (PACKAGE / "core").glob("*.py") if p.stem != "__init__")
    modules += ["lakecleaner.cli", "lakecleaner.airflow.provider", "lakecleaner.airflow.dashboard"]
    code = (f"import sys\nfor m in {modules!r}: __import__(m)\n"
            "print(sorted({n.split('.')[0] for n in sys.modules} & {'pyspark', 'airflow', 'great_expectations'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(PACKAGE.parent)}).stdout
    assert out.strip() == "[]"
