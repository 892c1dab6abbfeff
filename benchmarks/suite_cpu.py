"""Where the test suite's CPU goes (issue 38): a pytest plugin, run on purpose, never in CI.

    PYTHONPATH=benchmarks:include .venv/bin/python -m pytest -q -p suite_cpu -p no:cacheprovider
    .venv/bin/python benchmarks/suite_cpu.py            # the summary, by module

Run it in one process (no ``-n``): the figures are the machine's busy time (psutil's cpu_times)
around each test's set-up, call and teardown, so they belong to the test only when nothing else runs.
A thread samples the JVM and Python processes every half second and charges each to the test that
was running when it first appeared (a session JVM to the first test that needed it).

Under pytest-xdist (``-n 3 --dist loadscope --no-loadscope-reorder``, as ``make test``) the rows
carry their worker and times, and the summary shows what each worker ran when and the machine's busy
time over the run: how the workers share the run and how busy they keep the cores (a row's busy time
is then the whole machine's, the other workers' included). What a test costs is then its worker's own
process tree (``own_cpu_s``: the worker, its session JVM, every spark-submit, Airflow process and
server it started, live or ended), which the summary by module shows instead. A process that
outlives its parent (re-parented to init) is lost to it; the busy time is not."""
from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

OUT = os.environ.get("SUITE_CPU_OUT", "/tmp/suite-cpu.jsonl")
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
SAMPLED = ("java", "python", "python3", "postgres", "airflow")
_current = {"test": "session"}
_processes: dict[int, dict] = {}


def _busy_s() -> float:
    """The machine's busy CPU seconds so far (guest time is inside user already)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + t.steal


def _own_cpu_s() -> float:
    """CPU seconds of this process and its descendants: those still running, and those ended and
    reaped (the kernel adds an ended child's time, its own reaped children's included, to its parent's)."""
    me = psutil.Process()
    total = 0.0
    for proc in (me, *me.children(recursive=True)):
        try:
            t = proc.cpu_times()
        except psutil.Error:  # ended between the listing and the look: its time reaches its parent
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _sample_forever() -> None:
    while True:
        for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
            info = proc.info
            if info["name"] not in SAMPLED or info["cpu_times"] is None:  # None: gone or not ours to read
                continue
            seen = _processes.setdefault(proc.pid, {"comm": info["name"], "test": _current["test"],
                                                    "cmd": " ".join(info["cmdline"] or ())[:300]})
            seen["cpu"] = info["cpu_times"].user + info["cpu_times"].system
        time.sleep(0.5)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # one sampler, in the controller under xdist: it sees every process
        threading.Thread(target=_sample_forever, daemon=True).start()


def _record(nodeid: str, phase: str, busy: float, started: float, own: float) -> None:
    with open(OUT, "a") as out:
        out.write(json.dumps({"test": nodeid, "phase": phase, "cpu_s": round(_busy_s() - busy, 2),
                              "own_cpu_s": round(_own_cpu_s() - own, 2),
                              "wall_s": round(time.time() - started, 2), "worker": WORKER,
                              "start": round(started, 2), "busy_at_start": round(busy, 2)}) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _current["test"] = item.nodeid
    busy, started, own = _busy_s(), time.time(), _own_cpu_s()
    yield
    _record(item.nodeid, "setup", busy, started, own)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    busy, started, own = _busy_s(), time.time(), _own_cpu_s()
    yield
    _record(item.nodeid, "call", busy, started, own)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    busy, started, own = _busy_s(), time.time(), _own_cpu_s()
    yield
    _record(item.nodeid, "teardown", busy, started, own)


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        return
    with open(OUT.replace(".jsonl", f"-processes-{WORKER}.json"), "w") as out:
        json.dump(_processes, out)


def summary(path: str = OUT) -> str:
    """CPU and wall seconds by module, largest first; the workers' timelines if there were several;
    then the processes' CPU by kind."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    # several workers: the machine's busy time around a test is every worker's, its own tree is its
    cpu = "own_cpu_s" if len({r["worker"] for r in rows}) > 1 and all("own_cpu_s" in r for r in rows) else "cpu_s"
    by_module = collections.defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        module = by_module[row["test"].split("::")[0]]
        module[0] += row[cpu]
        module[1] += row["wall_s"]
    lines = [f"{cpu_s:8.0f} {wall:8.0f}  {name}" for name, (cpu_s, wall)
             in sorted(by_module.items(), key=lambda kv: -kv[1][0])]
    kinds = collections.defaultdict(lambda: [0, 0.0])
    for processes in Path(path).parent.glob(Path(path).stem + "-processes-*.json"):
        for proc in json.loads(processes.read_text()).values():
            kind = kinds["pyspark.daemon" if "pyspark.daemon" in proc["cmd"] else proc["comm"]]
            kind[0] += 1
            kind[1] += proc.get("cpu", 0.0)
    heading = "  cpu s   wall s  module" + (" (cpu: each worker's own processes)" if cpu == "own_cpu_s" else "")
    return "\n".join([heading, *lines, *_timelines(rows), "", "processes: kind, count, cpu s",
                      *(f"{k} {n} {cpu:.0f}" for k, (n, cpu) in sorted(kinds.items(), key=lambda kv: -kv[1][1]))])


def _timelines(rows: list[dict]) -> list[str]:
    """Per worker, each module's start and end (s from the run's first test); the machine's busy time."""
    timed = [r for r in rows if "start" in r]
    if len({r["worker"] for r in timed}) < 2:
        return []
    t0 = min(r["start"] for r in timed)
    first, last = min(timed, key=lambda r: r["start"]), max(timed, key=lambda r: r["start"] + r["wall_s"])
    wall = last["start"] + last["wall_s"] - t0
    busy = last["busy_at_start"] + last["cpu_s"] - first["busy_at_start"]
    out = ["", f"workers: {wall:.0f} s, the machine busy {busy:.0f} core-s ({busy / wall:.2f} cores)"]
    for worker in sorted({r["worker"] for r in timed}):
        spans: dict[str, list[float]] = {}
        for r in sorted((r for r in timed if r["worker"] == worker), key=lambda r: r["start"]):
            span = spans.setdefault(r["test"].split("::")[0], [r["start"], 0.0])
            span[1] = r["start"] + r["wall_s"]
        out += [f"{worker}:", *(f"  {a - t0:6.0f} {b - t0:6.0f}  {m}" for m, (a, b) in spans.items())]
    return out


if __name__ == "__main__":
    print(summary(sys.argv[1] if len(sys.argv) > 1 else OUT))
