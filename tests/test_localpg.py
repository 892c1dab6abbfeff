"""lakecleaner_dev.localpg on Debian's real PostgreSQL: a cluster directory is only ever a file name
(never shell text: a space works, ``$(...)`` runs nothing), and a cluster asks for its password on
TCP (scram-sha-256) and keeps its socket in a private directory."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from lakecleaner_dev import localpg


@pytest.fixture
def odd_base():
    """A traversable directory under /tmp (the cluster belongs to user postgres when run as root)
    whose path has a space in it; removed afterwards, cluster and all."""
    if not localpg.available():
        pytest.fail(localpg.MISSING)
    base = Path(tempfile.mkdtemp(prefix="lakecleaner pg ", dir="/tmp"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _connect(port: int, **auth):
    import psycopg2

    return psycopg2.connect(host="127.0.0.1", port=port, dbname="iceberg", connect_timeout=10, **auth)


def test_a_cluster_directory_with_a_space_and_a_command_in_it_is_only_a_name(odd_base):
    canary = Path(f"/tmp/lakecleaner-canary-{uuid.uuid4().hex}")
    directory = odd_base / f"a b $(touch {canary})" / "pg"
    try:
        with localpg.local_postgres(("iceberg",), directory) as server:
            with _connect(server.port, user="postgres", password=server.password) as db, db.cursor() as cur:
                cur.execute("SELECT current_setting('data_directory')")
                assert Path(cur.fetchone()[0]).resolve() == (directory / "data").resolve()
        assert not canary.exists(), "a cluster path ran a shell command"
        with localpg.local_postgres(("iceberg",), directory) as again:  # a kept cluster: reused, same password
            assert again.password == server.password == localpg.kept_password(directory)
            _connect(again.port, user="postgres", password=again.password).close()
    finally:
        canary.unlink(missing_ok=True)
    assert not canary.exists()


def test_a_connection_without_the_password_is_refused(odd_base):
    import psycopg2

    with localpg.local_postgres(("iceberg",), odd_base / "pg") as server:
        for auth in ({"user": "postgres"}, {"user": "postgres", "password": "postgres"},
                     {"user": os.environ.get("USER") or "root"}):
            with pytest.raises(psycopg2.OperationalError, match="password"):
                _connect(server.port, **auth).close()
        with _connect(server.port, user="postgres", password=server.password) as db, db.cursor() as cur:
            cur.execute("SELECT current_setting('unix_socket_directories'), current_setting('password_encryption')")
            sockets, encryption = cur.fetchone()
        assert encryption == "scram-sha-256"
        socket_dir = Path(sockets.strip('"'))
        assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700
        assert "password" not in repr(server) and server.password not in repr(server)
        assert f":{server.password}@" in server.sqlalchemy_url("iceberg")
        catalog = localpg.jdbc_catalog(server, odd_base / "warehouse")
        assert catalog.spark_properties["jdbc.password"] == server.password
        assert f":{server.password}@" in catalog.pyiceberg_properties["uri"]


def test_a_cluster_made_with_trust_auth_gets_a_password_when_reused(odd_base):
    """A cluster kept by an earlier localpg (``make airflow-pg``'s airflow_home/postgres) was made
    with trust auth; started again, it asks for a password like a new one."""
    import psycopg2

    directory = odd_base / "old"
    directory.mkdir()
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_owner:
        shutil.chown(directory, "postgres")
    subprocess.run([*as_owner, f"{localpg._bin_dirs()[-1]}/initdb", "-D", str(directory / "data"), "-A", "trust",
                    "-U", "postgres"], check=True, capture_output=True)
    with localpg.local_postgres(("iceberg",), directory) as server:
        with pytest.raises(psycopg2.OperationalError, match="password"):
            _connect(server.port, user="postgres").close()
        _connect(server.port, user="postgres", password=server.password).close()
