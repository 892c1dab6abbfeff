"""A PostgreSQL cluster on this machine (Debian's server), for the JDBC catalog in tests, the chaos
run and a local Airflow's metadata database: ``initdb`` in a directory (a fresh temporary one, or
one kept between runs), a loopback port, stopped on exit. PostgreSQL refuses to run as root, so as
root the cluster belongs to ``postgres``.

As a command, it runs another one next to a kept cluster, with Airflow's database on it
(``make airflow-pg``)::

    python -m lakecleaner.localpg --dir airflow_home/postgres --database airflow -- make airflow
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
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
def local_postgres(databases: tuple[str, ...] = ("iceberg",), directory: Path | None = None,
                   port: int | None = None) -> Iterator[LocalPostgres]:
    """A running cluster with ``databases`` (user ``postgres``, trust auth on loopback only). With
    ``directory``, the cluster lives there and is kept (reused when it exists); else it is a
    temporary one, removed at the end."""
    if not available():
        raise RuntimeError(MISSING)
    pg = _bin_dirs()[-1]
    keep = directory is not None
    base = Path(directory).resolve() if keep else Path(tempfile.mkdtemp(prefix="lakecleaner-pg-", dir="/tmp"))
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([*as_owner, *cmd], capture_output=True, text=True)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {done.stderr or done.stdout}")
        return done

    fresh = not (base / "data" / "PG_VERSION").exists()
    base.mkdir(parents=True, exist_ok=True)
    if as_owner:
        shutil.chown(base, "postgres")
    if fresh:
        run(f"{pg}/initdb", "-D", str(base / "data"), "-A", "trust", "-U", "postgres")
    port = port or free_port()
    run(f"{pg}/pg_ctl", "-D", str(base / "data"), "-w", "-l", str(base / "server.log"), "-o",
        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c max_connections=200", "start")
    try:
        for database in databases:
            done = run(f"{pg}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", database, check=False)
            if done.returncode != 0 and "already exists" not in done.stderr:
                raise RuntimeError(f"createdb {database}: {done.stderr or done.stdout}")
        yield LocalPostgres(port, base)
    finally:
        run(f"{pg}/pg_ctl", "-D", str(base / "data"), "-m", "fast" if keep else "immediate", "stop", check=False)
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run a command next to a kept cluster, with Airflow's metadata database on it; the cluster
    stops when the command ends (or this process is asked to stop)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m lakecleaner.localpg", description=main.__doc__.split(";")[0])
    parser.add_argument("--dir", required=True, help="the cluster's directory (kept, reused)")
    parser.add_argument("--database", default="airflow")
    parser.add_argument("--port", type=int, default=0, help="default: a free loopback port")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (-- COMMAND ...)")
    signal.signal(signal.SIGTERM, _exit_once)  # stop the command, then the cluster, on the way out
    with local_postgres((args.database,), Path(args.dir), args.port or None) as server:
        url = server.sqlalchemy_url(args.database)
        print(f"lakecleaner: Airflow's metadata database: {url} (cluster in {server.directory})", flush=True)
        env = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url}
        # Its own process group, so that stopping reaches everything it started (make starts
        # airflow standalone, which starts its components) before the database goes.
        child = subprocess.Popen(command, env=env, process_group=0)
        try:
            return child.wait()
        except KeyboardInterrupt:
            return 130
        finally:
            _ignore_stop_signals()
            stop_group(child)


def _exit_once(*_) -> None:
    """SIGTERM: exit through the cleanup, which no further SIGTERM may cut short. make forwards its
    own SIGTERM to its children on top of the one their process group gets, so this process sees
    two; the second used to abort stop_group and leave airflow standalone running."""
    _ignore_stop_signals()
    sys.exit(143)


def _ignore_stop_signals() -> None:
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def stop_group(child: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM the process group ``child`` leads, wait up to ``grace_s`` for all of it to go, then
    SIGKILL what is left."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + grace_s
        while time.time() < deadline:
            child.poll()  # reap it, or the group never empties
            try:
                os.killpg(child.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
