"""Alerts through Airflow's notifiers (``BaseNotifier``: SMTP, Slack and the like from their
providers), configured in the YAML's ``notifiers:`` section so an operator never edits the DAG.

What alerts (one definition, read from the run's recorded facts, so a crashed application's tables
alert as well): a table newly marked uncleanable by this run, a data-quality rule at ``fail``
severity that failed, and a table still past ``max.compaction.lag.ms`` after the run (one the run
compacted is back within its bound, so routine must-clean scheduling does not page anyone).

Sent by the DAG's summary task, where Airflow and the run's context are: the cleaning
applications only log (``scheduler.alert``). A notifier's templated fields see the alert as
``alert`` (``{{ alert.subject }}``, ``{{ alert.message }}``, ``{{ alert.table }}``, ``{{ alert.kind }}``).
"""
from __future__ import annotations

import importlib
import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from .config import ConfigError, NotifierSpec

log = logging.getLogger("lakecleaner")


@dataclass(frozen=True)
class Alert:
    kind: str  # one of config.ALERT_KINDS
    table: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        return f"lakecleaner: {self.kind.replace('_', ' ')}: {self.table}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "subject": self.subject}


def run_alerts(evaluations: Iterable[Mapping], report: Mapping, marked_at_ms: Mapping[str, int | None],
               now_ms: int) -> list[Alert]:
    """The alerts of one scheduler run. ``report`` is scheduler.summarize's; ``marked_at_ms`` maps a
    failed table to when its uncleanable mark was set (the cleaner state), so only this run's new
    marks alert, not every run that skips an uncleanable table."""
    rows = {r["table"]: r for r in report.get("tables", [])}
    out = []
    for table, row in rows.items():
        if row.get("status") != "failed":
            continue
        if marked_at_ms.get(table) == now_ms:
            out.append(Alert("uncleanable", table, f"table {table} is now marked uncleanable: it is skipped until "
                             f"an operator clears it (lakecleaner clear-uncleanable {table}). Last error: {row.get('error')}",
                             {"failed_step": row.get("failed_step"), "error": row.get("error")}))
        if row.get("failed_step") == "validate":
            out.append(Alert("quality_failed", table, str(row.get("error")), {"error": row.get("error")}))
    for e in evaluations:
        delay = int(e.get("max_compaction_delay_ms") or 0)
        lag = e.get("max_compaction_lag_ms")
        if lag is None or delay <= 0 or rows.get(e["table"], {}).get("status") == "ok":
            continue
        outcome = rows.get(e["table"], {}).get("status") or e.get("status")
        out.append(Alert("compaction_lag", e["table"],
                         f"table {e['table']}: dirty data is {delay / 1000:.0f} s past max.compaction.lag.ms "
                         f"({lag} ms) and this run did not compact it ({outcome})",
                         {"max_compaction_delay_ms": delay, "max_compaction_lag_ms": lag, "outcome": outcome}))
    return out


def notifier_class(spec: NotifierSpec, index: int) -> type:
    """The configured class, imported and checked to be an Airflow notifier; a ConfigError naming
    the entry otherwise."""
    from airflow.sdk import BaseNotifier

    module, _, name = spec.class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(None, f"notifiers[{index}].class", spec.class_path,
                          f"cannot be imported ({type(exc).__name__}: {exc})") from None
    if not (isinstance(cls, type) and issubclass(cls, BaseNotifier)):
        raise ConfigError(None, f"notifiers[{index}].class", spec.class_path,
                          "is not an Airflow notifier (airflow.sdk.BaseNotifier)")
    return cls


def send(specs: Iterable[NotifierSpec], alerts: list[Alert], context: Mapping) -> list[str]:
    """Send each alert to each notifier configured for its kind, a fresh notifier per alert (a
    notifier renders its templates in place). One notifier failing does not stop the others;
    returns the errors, each naming the notifier and the alert."""
    errors = []
    for i, spec in enumerate(specs):
        wanted = [a for a in alerts if a.kind in spec.alerts]
        if not wanted:
            continue
        try:
            cls = notifier_class(spec, i)
        except ConfigError as exc:
            errors.append(str(exc))
            continue
        for alert in wanted:
            try:
                cls(**spec.kwargs)({**context, "alert": alert.as_dict()})
            except Exception as exc:  # noqa: BLE001 - the other alerts and notifiers still go out
                errors.append(f"notifiers[{i}] ({spec.class_path}) could not send {alert.subject}: "
                              f"{type(exc).__name__}: {exc}")
    for error in errors:
        log.error("lakecleaner: %s", error)
    return errors
