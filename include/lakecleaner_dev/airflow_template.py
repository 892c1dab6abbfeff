"""A migrated Airflow metadata database on SQLite, copied into a test's Airflow home instead of
migrated there again: ``airflow db migrate`` costs ~2.7 CPU s, and a test run made four or five
identical ones (the DAG tests' home on each worker, the UI tests' API server). Made once per machine
and installed Airflow (the apache-airflow distributions' versions are its key), in run_cache's
directory. What a migration leaves (the schema, the default pool; no connection, no DAG bundle) does
not depend on the home it ran for."""
from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

from lakecleaner_dev.run_cache import NotMade, cache_dir, entry


def airflow_key() -> str:
    dists = sorted(f"{d.metadata['Name'].lower()}=={d.version}" for d in importlib.metadata.distributions()
                   if (d.metadata["Name"] or "").lower().startswith("apache-airflow"))
    return hashlib.sha256("\n".join(dists).encode()).hexdigest()[:16]


SQLITE = "sqlite:///"
DATABASE_URL = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"


def migrated_sqlite(env: dict[str, str]) -> Path:
    """The SQLite database ``env`` names (AIRFLOW__DATABASE__SQL_ALCHEMY_CONN) as ``airflow db migrate``
    leaves it; the first time, the migration runs in ``env`` with that URL pointed at the template."""
    url = env.get(DATABASE_URL, "")
    if not url.startswith(SQLITE):
        raise ValueError(f"{DATABASE_URL}={url!r}: a migrated template exists only for a SQLite database")
    dest = Path(url.removeprefix(SQLITE))
    shutil.copyfile(entry(cache_dir(), f"airflow-{airflow_key()}.db", lambda part: _migrate(env, part), ".airflow-db"),
                    dest)
    return dest


def _migrate(env: dict[str, str], made: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True,
                          env={**env, DATABASE_URL: f"{SQLITE}{made}"})
    if done.returncode != 0:
        raise NotMade(f"airflow db migrate: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
