"""The tests' Airflow homes get a copy of one migrated SQLite database (lakecleaner_dev.airflow_template)
instead of migrating their own: the copy must be what Airflow itself calls fully migrated."""
import os
import sqlite3
import subprocess
import sys

from lakecleaner_dev.airflow_template import migrated_sqlite


def test_a_copied_database_is_fully_migrated_for_this_airflow(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}"}
    db = migrated_sqlite(env)
    check = subprocess.run([sys.executable, "-m", "airflow", "db", "check-migrations", "-t", "0"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT pool, slots FROM slot_pool").fetchall() == [("default_pool", 128)]
