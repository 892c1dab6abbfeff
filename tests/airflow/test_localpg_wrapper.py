"""``python -m lakecleaner_dev.localpg -- COMMAND`` (what ``make airflow-pg`` runs): asked to stop, it
stops everything the command started before it goes, even when the stop request comes twice. make
forwards its own SIGTERM to its children on top of the one the process group gets, so the
wrapper sees two; the second used to cut its cleanup short and leave ``airflow standalone`` and
its api-server running after the test that started them (found in CI).

Written so that it cannot hang: every read has a deadline, and the command is a Python process
that sets up its own SIGTERM handling (unblocked, handled) rather than a shell trap, which a
signal ignored or blocked by whatever started pytest would silently disable."""
from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lakecleaner_dev import localpg

# The command: on SIGTERM it says so, takes 3 s to stop, then exits.
SLOW_TO_STOP = """
import os, signal, sys, time
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
def stop(*_):
    print("GOT_TERM", flush=True)
    time.sleep(3)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("READY", os.getpgid(0), flush=True)
while True:
    time.sleep(0.2)
"""


class Output:
    """The wrapper's output, read without ever blocking past a deadline."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.seen, self._buf = proc, [], b""
        os.set_blocking(proc.stdout.fileno(), False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(proc.stdout, selectors.EVENT_READ)

    def line_starting(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            for line in self._lines():
                if line.startswith(prefix):
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no line starting {prefix!r} from the wrapper within {timeout} s (exit "
                            f"{self.proc.poll()}); it printed: {self.seen[-20:]}")
            if self._sel.select(min(left, 0.5)):
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk and self.proc.poll() is not None:
                    pytest.fail(f"the wrapper exited {self.proc.returncode} before a line starting {prefix!r}; "
                                f"it printed: {self.seen[-20:]}")
                self._buf += chunk

    def _lines(self):
        while b"\n" in self._buf:
            raw, self._buf = self._buf.split(b"\n", 1)
            line = raw.decode(errors="replace")
            self.seen.append(line)
            yield line


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
    wrapper = subprocess.Popen([sys.executable, "-m", "lakecleaner_dev.localpg", "--dir", str(home / "pg"), "--",
                                sys.executable, "-c", SLOW_TO_STOP], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    command = None
    try:
        out = Output(wrapper)
        command = int(out.line_starting("READY", 120).split()[1])  # leads its own process group
        wrapper.send_signal(signal.SIGTERM)
        out.line_starting("GOT_TERM", 30)  # the wrapper is stopping the command's group
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
                            "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(home, ignore_errors=True)
