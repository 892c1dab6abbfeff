"""An Airflow executor that runs every task instance the way the KubernetesExecutor runs a pod, as
far as files go: a new process (the Task SDK's ``execute_workload``, what a worker pod runs) that
talks to Airflow only through the API server's Execution API, with a HOME, a TMPDIR and a working
directory of its own, JVMs told to keep their temporary files there too, and all of it deleted when
the task ends, as a pod's file system is. Nothing one task leaves on local disk reaches another.

For tests/airflow/isolated_dag_run.py (``dag.test(use_executor=True)``); one task at a time.
Configured by environment variables the driver sets (LAKECLEANER_ISOLATION_*).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from airflow.executors.base_executor import BaseExecutor

# What a task's process inherits from the driver: the interpreter's PATH (spark-submit beside it),
# Java, and the deployment's settings (LAKECLEANER_ISOLATION_TASK_ENV, JSON). Nothing else: no
# AIRFLOW_HOME (a worker pod's is its image's; here it defaults to ~/airflow, in the task's HOME).
INHERITED = ("PATH", "JAVA_HOME", "LANG", "LC_ALL", "TZ")


def task_dir_name(key) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{key.task_id}.{key.map_index}.{key.try_number}")


class IsolatedTaskExecutor(BaseExecutor):
    is_local = True
    supports_ad_hoc_ti_run = True

    def __init__(self, *args, **kwargs):
        super().__init__(parallelism=1)
        self.root = Path(os.environ["LAKECLEANER_ISOLATION_TASKS"])
        self.task_env = json.loads(os.environ.get("LAKECLEANER_ISOLATION_TASK_ENV", "{}"))
        self.record = Path(os.environ["LAKECLEANER_ISOLATION_RECORD"])  # what each task did, for the report

    def _process_workloads(self, workload_list) -> None:
        for workload in workload_list:
            self.queued_tasks.pop(workload.key, None)
            self.running.add(workload.key)
            code = self._run(workload)
            (self.success if code == 0 else self.fail)(workload.key)

    def _run(self, workload) -> int:
        key = workload.ti.key
        base = self.root / task_dir_name(key)
        home, tmp, work = base / "home", base / "tmp", base / "work"
        for d in (home, tmp, work):
            d.mkdir(parents=True)
        env = {k: os.environ[k] for k in INHERITED if k in os.environ}
        env.update(self.task_env)
        env.update({
            "HOME": str(home), "TMPDIR": str(tmp),
            # The JVM ignores TMPDIR: its temporary files (Spark's, native libraries it unpacks),
            # Spark's scratch space (spark.local.dir, also SPARK_LOCAL_DIRS) and no hsperfdata file
            # (which goes to /tmp whatever java.io.tmpdir says), for every JVM the task starts.
            "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={tmp} -Dspark.local.dir={tmp} -XX:-UsePerfData",
            "SPARK_LOCAL_DIRS": str(tmp),
            # Python reads the bytecode the image was built with and writes none, as in a pod whose
            # image is read-only. (A cache prefix in the task's scratch space would make every task
            # compile all it imports anew: Airflow, PySpark and GX, about 7 CPU s a process.)
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "airflow.sdk.execution_time.execute_workload", "--json-string",
             workload.model_dump_json()], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=1200)
        files = sorted(str(p.relative_to(base)) for p in base.rglob("*"))
        with open(self.record, "a") as fh:
            fh.write(json.dumps({"task": task_dir_name(key), "exit": proc.returncode,
                                 "seconds": round(time.monotonic() - started, 1), "files": len(files),
                                 "log_tail": proc.stdout[-6000:]}) + "\n")
        shutil.rmtree(base)  # the pod is gone, and its file system with it
        return proc.returncode

    def end(self) -> None:
        pass

    def terminate(self) -> None:
        pass
