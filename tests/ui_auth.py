"""Airflow's SimpleAuthManager with one addition for the UI tests (tests/ui_lake.py): some users may
read only the DAGs named for them.

SimpleAuthManager grants by role and, in multi-team mode, by team, and a DAG's team is its DAG
bundle's: it cannot let a user read one DAG of a file and not another. This subclass refuses, for the
users named in ``LAKECLEANER_TEST_DAG_ACCESS`` (``user=dag_a,dag_b;other=``: an empty list reads no
DAG), every DAG outside their list, whatever the access entity; everything else (users, roles,
passwords, the login page, tokens) is SimpleAuthManager's. Asked about no DAG in particular (a
listing, which then asks DAG by DAG), such a user is allowed if their list is not empty. Loaded by the test's API server as
``[core] auth_manager = ui_auth.PerDagAuthManager``.
"""
from __future__ import annotations

import os

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

ACCESS_ENV = "LAKECLEANER_TEST_DAG_ACCESS"


def dag_access(spec: str | None = None) -> dict[str, set[str]]:
    """user -> the DAG ids they may read, for the users the spec restricts."""
    spec = os.environ.get(ACCESS_ENV, "") if spec is None else spec
    out = {}
    for entry in filter(None, (e.strip() for e in spec.split(";"))):
        user, _, dags = entry.partition("=")
        out[user.strip()] = {d.strip() for d in dags.split(",") if d.strip()}
    return out


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        allowed = dag_access().get(user.username)
        dag_id = details.id if details else None
        # no dag_id: "some DAG" (a listing, which then filters DAG by DAG)
        if allowed is not None and (dag_id not in allowed if dag_id is not None else not allowed):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
