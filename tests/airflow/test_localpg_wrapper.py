"""``python -m lakecleaner.localpg -- COMMAND`` (what ``make airflow-pg`` runs): asked to stop, it
stops everything the command started before it goes, even when the stop request comes twice. make
forwards its own SIGTERM to its children on top of the one the process group gets, so the
wrapper sees two; the second used to cut its cleanup short and leave ``airflow standalone`` and
its api-server running after the test that started them (found in CI)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lakecleaner import localpg

# A command that takes a while to stop: on SIGTERM it waits 3 s, then exits.
SLOW_TO_STOP = 'trap "echo GOT_TERM; sleep 3; exit 0" TERM; echo READY $$; while :; do sleep 0.2; done'


def _read_until(proc: subprocess.Popen, prefix: str, timeout: float = 120) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            break
    pytest.fail(f"no line starting {prefix!r} from the wrapper (exit {proc.poll()})")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_a_second_sigterm_does_not_leave_the_command_running():
    if not localpg.available():
        pytest.fail(localpg.MISSING)
    home = Path(tempfile.mkdtemp(prefix="lakecleaner-localpg-", dir="/tmp"))
    os.chmod(home, 0o755)  # the cluster inside belongs to user postgres
    wrapper = subprocess.Popen([sys.executable, "-m", "lakecleaner.localpg", "--dir", str(home / "pg"), "--",
                                "sh", "-c", SLOW_TO_STOP], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    command = None
    try:
        command = int(_read_until(wrapper, "READY").split()[1])  # leads its own process group
        wrapper.send_signal(signal.SIGTERM)
        _read_until(wrapper, "GOT_TERM")  # the wrapper is stopping the command's group
        wrapper.send_signal(signal.SIGTERM)  # as make forwards it
        wrapper.wait(timeout=120)
        assert not _group_alive(command), "the wrapper went while its command was still running"
        assert wrapper.returncode == 143
    finally:
        for pgid in (command, wrapper.pid):
            if pgid and _group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
        wrapper.wait()
        if (home / "pg" / "data" / "postmaster.pid").exists():  # the wrapper was killed before it could stop it
            as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
            subprocess.run([*as_owner, f"{localpg._bin_dirs()[-1]}/pg_ctl", "-D", str(home / "pg" / "data"),
                            "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
