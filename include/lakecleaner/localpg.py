"""A throwaway PostgreSQL cluster on this machine (Debian's server), for the JDBC catalog in tests,
the chaos run and a local Airflow: ``initdb`` in a fresh directory, a free loopback port, torn down
on exit. PostgreSQL refuses to run as root, so as root the cluster belongs to ``postgres``."""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

JDBC_JAR = "/usr/share/java/postgresql.jar"  # Debian's libpostgresql-jdbc-java (make pg-deps)
MISSING = "PostgreSQL or its JDBC driver is missing: `make pg-deps` installs Debian's"


@dataclass(frozen=True)
class LocalPostgres:
    port: int
    directory: Path

    def jdbc_url(self, database: str) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{database}"

    def sqlalchemy_url(self, database: str) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"


def jdbc_catalog(port: int, warehouse: Path, name: str = "pglake", database: str = "iceberg"):
    """Iceberg's JDBC catalog on a local cluster: Spark's JdbcCatalog and pyiceberg's SqlCatalog on
    the same database under the same catalog name, so both see the same tables."""
    from .config import CatalogConfig

    return CatalogConfig(
        name=name, type="sql", warehouse=f"file://{warehouse}",
        spark_properties={"uri": f"jdbc:postgresql://127.0.0.1:{port}/{database}", "jdbc.user": "postgres",
                          "jdbc.schema-version": "V1"},
        pyiceberg_properties={"uri": f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{database}"})


def available() -> bool:
    return bool(_bin_dirs()) and os.path.exists(JDBC_JAR)


def _bin_dirs() -> list[str]:
    return sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_postgres(databases: tuple[str, ...] = ("iceberg",)) -> Iterator[LocalPostgres]:
    """A running cluster with ``databases`` created (user ``postgres``, trust auth on loopback)."""
    if not available():
        raise RuntimeError(MISSING)
    pg = _bin_dirs()[-1]
    base = Path(tempfile.mkdtemp(prefix="lakecleaner-pg-", dir="/tmp"))  # traversable by its owner
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_owner:
        shutil.chown(base, "postgres")

    def run(*cmd: str) -> None:
        done = subprocess.run([*as_owner, *cmd], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {done.stderr or done.stdout}")

    port = free_port()
    run(f"{pg}/initdb", "-D", str(base / "data"), "-A", "trust", "-U", "postgres")
    run(f"{pg}/pg_ctl", "-D", str(base / "data"), "-w", "-l", str(base / "server.log"), "-o",
        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c max_connections=200", "start")
    try:
        for database in databases:
            run(f"{pg}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", database)
        yield LocalPostgres(port, base)
    finally:
        run(f"{pg}/pg_ctl", "-D", str(base / "data"), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)
