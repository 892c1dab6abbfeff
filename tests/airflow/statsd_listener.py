"""A StatsD server as far as the DAG tests need one (tests/airflow is on sys.path under pytest), and
Airflow's task-side ``Stats`` pointed at it: every datagram on a loopback UDP port, kept."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid

import pytest


class StatsdListener:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self):
        while not self._stop.is_set():
            try:
                data, _ = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            self.lines += data.decode().splitlines()

    def flush(self, timeout: float = 10.0) -> list[str]:
        """Every line sent before this call: a marker sent to our own port arrives after them
        (loopback keeps a socket's order); the lines before it."""
        marker = f"flush.{uuid.uuid4().hex}:1|c"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            out.sendto(marker.encode(), ("127.0.0.1", self.port))
        deadline = time.monotonic() + timeout
        while marker not in self.lines:
            if time.monotonic() > deadline:
                raise AssertionError("the StatsD listener never got its own flush marker")
            time.sleep(0.05)
        return self.lines[:self.lines.index(marker)]

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


def metrics(lines: list[str], prefix: str) -> dict[tuple[str, str | None], list[tuple[float, str]]]:
    """(name, table tag) -> [(value, type)] of the lines whose name starts with ``prefix``."""
    out: dict = {}
    for line in lines:
        name, _, rest = line.partition(":")
        if not name.startswith(prefix):
            continue
        name, *tags = name.split(",")
        table = dict(t.split("=", 1) for t in tags).get("table")
        value, kind = rest.split("|")[:2]
        out.setdefault((name, table), []).append((float(value), kind))
    return out


@contextlib.contextmanager
def statsd_on():
    """Airflow's [metrics] pointed at a new listener (tags as InfluxDB-style ``statsd_influxdb_enabled``)
    and the task SDK's Stats initialized from that config, as each task process does when it starts
    (task_runner.main; dag.test runs tasks in this process); both as they were afterwards."""
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    listener = StatsdListener()
    env = {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(listener.port), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
           "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True"}
    try:
        with pytest.MonkeyPatch.context() as patch:  # the environment as it was afterwards
            for key, value in env.items():
                patch.setenv(key, value)
            stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
            yield listener
    finally:
        # Stats from the configuration as it is again (without [metrics] statsd_on: no metrics)
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
        listener.close()
