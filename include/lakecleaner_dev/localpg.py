"""A PostgreSQL cluster on this machine (Debian's server), for the JDBC catalog in tests, the chaos
run and a local Airflow's metadata database: ``initdb`` in a directory (a fresh temporary one, or
one kept between runs), a loopback port, stopped on exit. PostgreSQL refuses to run as root, so as
root the cluster belongs to ``postgres``. Its superuser ``postgres`` has a generated password (kept
in the cluster's directory, file ``password``, mode 0600), asked for on every TCP connection; the
URLs handed out carry it.

As a command, it runs another one next to a kept cluster, with Airflow's database on it
(``make airflow-pg``)::

    python -m lakecleaner_dev.localpg --dir airflow_home/postgres --database airflow -- make airflow
"""
from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

JDBC_JAR = "/usr/share/java/postgresql.jar"  # Debian's libpostgresql-jdbc-java (make pg-deps)
MISSING = "PostgreSQL or its JDBC driver is missing: `make pg-deps` installs Debian's"


@dataclass(frozen=True)
class LocalPostgres:
    port: int
    directory: Path
    password: str = field(repr=False)  # the superuser's (postgres), asked for on every TCP connection
    user: str = "postgres"

    def sqlalchemy_url(self, database: str) -> str:
        return f"postgresql+psycopg2://{self.user}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{database}"

    def shown_url(self, database: str) -> str:
        """The SQLAlchemy URL without its password, for logs."""
        return f"postgresql+psycopg2://{self.user}:***@127.0.0.1:{self.port}/{database}"

    def jdbc_url(self, database: str) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{database}"


def jdbc_catalog(server: LocalPostgres, warehouse: Path, name: str = "pglake", database: str = "iceberg"):
    """Iceberg's JDBC catalog on a local cluster: Spark's JdbcCatalog and pyiceberg's SqlCatalog on
    the same database under the same catalog name, so both see the same tables."""
    from lakecleaner.core.config import CatalogConfig

    return CatalogConfig(
        name=name, type="sql", warehouse=f"file://{warehouse}",
        spark_properties={"uri": server.jdbc_url(database), "jdbc.user": server.user,
                          "jdbc.password": server.password, "jdbc.schema-version": "V1"},
        pyiceberg_properties={"uri": server.sqlalchemy_url(database)})


def available() -> bool:
    return bool(_bin_dirs()) and os.path.exists(JDBC_JAR)


def _bin_dirs() -> list[str]:
    return sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PASSWORD_FILE = "password"  # in the cluster's directory, readable by its maker only
SETTINGS_FILE = "lakecleaner.conf"  # in the data directory, included by postgresql.conf
# A password over TCP; over the socket (in a private directory) only the OS user of the same name.
HBA = """# written by lakecleaner_dev.localpg at every start
local   all   all                  peer
host    all   all   127.0.0.1/32   scram-sha-256
host    all   all   ::1/128        scram-sha-256
"""
SOCKET_PATH_MAX = 107  # sun_path, less its terminating NUL


def kept_password(directory: str | os.PathLike) -> str:
    """The superuser password of the cluster kept in ``directory``."""
    return (Path(directory).resolve() / PASSWORD_FILE).read_text().strip()


def _conf_string(value: str) -> str:
    """``value`` as a postgresql.conf string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


@contextmanager
def local_postgres(databases: tuple[str, ...] = ("iceberg",), directory: Path | None = None,
                   port: int | None = None) -> Iterator[LocalPostgres]:
    """A running cluster with ``databases`` (superuser ``postgres`` with a generated password,
    loopback only). With ``directory``, the cluster lives there and is kept (reused when it
    exists); else it is a temporary one, removed at the end.

    Every command gets the cluster's paths as arguments relative to its working directory, the
    cluster's: pg_ctl hands its -D, -l and -o to /bin/sh, so a path there would be shell text (a
    space splits it, ``$(...)`` runs). The settings are written to a file the server reads."""
    if not available():
        raise RuntimeError(MISSING)
    pg = _bin_dirs()[-1]
    keep = directory is not None
    base = Path(directory).resolve() if keep else Path(tempfile.mkdtemp(prefix="lakecleaner-pg-", dir="/tmp"))
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def run(*cmd: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        done = subprocess.run([*as_owner, *cmd], capture_output=True, text=True, cwd=base, **kwargs)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} (in {base}): {done.stderr or done.stdout}")
        return done

    base.mkdir(parents=True, exist_ok=True)
    if as_owner:
        shutil.chown(base, "postgres")
    if not (base / "data" / "PG_VERSION").exists():
        # trust is never in force: pg_hba.conf is replaced before the server first starts
        run(f"{pg}/initdb", "-D", "data", "-A", "trust", "-U", "postgres")
    port = port or free_port()
    sockets = _socket_dir(base, port, as_owner)
    _write_owned(base / "data" / "pg_hba.conf", HBA, bool(as_owner))
    _write_settings(base / "data", port, sockets, bool(as_owner))
    password = _password(base, pg, run)
    run(f"{pg}/pg_ctl", "-D", "data", "-w", "-l", "server.log", "start")
    try:
        env = {**os.environ, "PGPASSWORD": password}
        for database in databases:
            done = run(f"{pg}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", database,
                       check=False, env=env)
            if done.returncode != 0 and "already exists" not in done.stderr:
                raise RuntimeError(f"createdb {database}: {done.stderr or done.stdout}")
        yield LocalPostgres(port, base, password)
    finally:
        run(f"{pg}/pg_ctl", "-D", "data", "-m", "fast" if keep else "immediate", "stop", check=False)
        if sockets.parent != base:
            shutil.rmtree(sockets, ignore_errors=True)
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


def _socket_dir(base: Path, port: int, as_owner: list[str]) -> Path:
    """The server's socket directory, private to its owner (0700): in the cluster's directory, or in
    a fresh one under /tmp when that path is too long for a socket."""
    sockets = base / "socket"
    if len(str(sockets / f".s.PGSQL.{port}")) > SOCKET_PATH_MAX:
        sockets = Path(tempfile.mkdtemp(prefix="lakecleaner-pg-socket-", dir="/tmp"))
    sockets.mkdir(mode=0o700, exist_ok=True)
    os.chmod(sockets, 0o700)
    if as_owner:
        shutil.chown(sockets, "postgres")
    return sockets


def _write_owned(path: Path, text: str, to_postgres: bool) -> None:
    path.write_text(text)
    os.chmod(path, 0o600)
    if to_postgres:
        shutil.chown(path, "postgres")


def _write_settings(data: Path, port: int, sockets: Path, to_postgres: bool) -> None:
    """This start's settings in lakecleaner.conf, which postgresql.conf includes (once)."""
    element = '"' + str(sockets).replace('"', '""') + '"'  # one list element, commas and all
    _write_owned(data / SETTINGS_FILE, f"port = {port}\nlisten_addresses = '127.0.0.1'\nmax_connections = 200\n"
                 f"unix_socket_directories = {_conf_string(element)}\npassword_encryption = 'scram-sha-256'\n",
                 to_postgres)
    conf = data / "postgresql.conf"
    include = f"include_if_exists = '{SETTINGS_FILE}'"
    if include not in conf.read_text().splitlines():
        with open(conf, "a") as out:
            out.write(f"\n# lakecleaner_dev.localpg's settings (port, sockets, listen addresses)\n{include}\n")


def _password(base: Path, pg: str, run) -> str:
    """The superuser's password: the kept one, else a new one, set while the server is down
    (single-user mode reads the statement from stdin: it is on no command line)."""
    path = base / PASSWORD_FILE
    if path.exists():
        return path.read_text().strip()
    password = secrets.token_urlsafe(24)  # letters, digits, - and _: a plain SQL literal
    done = run(f"{pg}/postgres", "--single", "-D", "data", "postgres",
               input=f"SET password_encryption = 'scram-sha-256'\nALTER ROLE postgres PASSWORD '{password}'\n")
    if "ERROR" in done.stdout + done.stderr:  # single-user mode reports a failed statement, exits 0
        raise RuntimeError(f"cannot set the superuser password of the cluster in {base}: {done.stderr or done.stdout}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return password


def main(argv: list[str] | None = None) -> int:
    """Run a command next to a kept cluster, with Airflow's metadata database on it; the cluster
    stops when the command ends (or this process is asked to stop)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m lakecleaner_dev.localpg", description=main.__doc__.split(";")[0])
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
        print(f"lakecleaner: Airflow's metadata database: {server.shown_url(args.database)} (cluster in "
              f"{server.directory}, password in its {PASSWORD_FILE} file)", flush=True)
        env = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": server.sqlalchemy_url(args.database)}
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
