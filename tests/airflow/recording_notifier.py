"""A real Airflow notifier for the tests: appends what it got (its rendered template and the
alert) as a JSON line to ``path``. Configured from the YAML's ``notifiers:`` section by its
dotted path ``recording_notifier.RecordingNotifier`` (tests/airflow is on sys.path under pytest)."""
from __future__ import annotations

import json

from airflow.sdk import BaseNotifier


class RecordingNotifier(BaseNotifier):
    template_fields = ("message",)

    def __init__(self, path: str, message: str = "{{ alert.subject }}"):
        super().__init__()
        self.path, self.message = path, message

    def notify(self, context) -> None:
        with open(self.path, "a") as out:
            out.write(json.dumps({"message": self.message, "alert": context["alert"],
                                  "run_id": getattr(context.get("dag_run"), "run_id", None)}) + "\n")
