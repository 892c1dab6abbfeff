"""Alerts through Airflow's notifiers (``BaseNotifier``: SMTP, Slack and the like from their
providers), configured in the YAML's ``notifiers:`` section so an operator never edits the DAG.

What alerts (one definition, read from the run's recorded facts, so a crashed application's tables
alert as well): a table newly marked uncleanable by this run, a data-quality rule at ``fail``
severity that failed, and a table still past ``max.compaction.lag.ms`` after the run (one the run
compacted is back within its bound, so routine must-clean scheduling does not page anyone).

Sent by the DAG's summary task, where Airflow and the run's context are: the cleaning
applications only log (``scheduler.alert``). A notifier's templated fields see the alert as
``alert`` (``{{ alert.subject }}``, ``{{ alert.message }}``, ``{{ alert.table }}``, ``{{ alert.kind }}``),
its texts HTML-escaped. The notifier classes are resolved and checked when the DAG loads the config.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import logging
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from lakecleaner.core.config import ConfigError, NotifierSpec
from lakecleaner.core.records import RunVerdict, Step, TableStatus

if TYPE_CHECKING:
    from lakecleaner.core.evaluate import Evaluation

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


def run_alerts(evaluations: Iterable[Evaluation], verdict: RunVerdict, marked_at_ms: Mapping[str, int | None],
               now_ms: int) -> list[Alert]:
    """The alerts of one scheduler run. ``verdict`` is scheduler.summarize's; ``marked_at_ms`` maps a
    failed table to when its uncleanable mark was set (the cleaner state), so only this run's new
    marks alert, not every run that skips an uncleanable table."""
    rows = {r.table: r for r in verdict.tables}
    out = []
    for table, row in rows.items():
        if row.status != TableStatus.FAILED:
            continue
        if marked_at_ms.get(table) == now_ms:
            out.append(Alert("uncleanable", table, f"table {table} is now marked uncleanable: it is skipped until "
                             f"an operator clears it (lakecleaner clear-uncleanable {table}). Last error: {row.error}",
                             {"failed_step": row.failed_step and str(row.failed_step), "error": row.error}))
        if row.failed_step == Step.VALIDATE:
            out.append(Alert("quality_failed", table, str(row.error), {"error": row.error}))
    for e in evaluations:
        delay = int(e.max_compaction_delay_ms or 0)
        lag = e.max_compaction_lag_ms
        row = rows.get(e.table)
        if lag is None or delay <= 0 or (row is not None and row.status == TableStatus.OK):
            continue
        outcome = str(row.status if row is not None else e.status)
        out.append(Alert("compaction_lag", e.table,
                         f"table {e.table}: dirty data is {delay / 1000:.0f} s past max.compaction.lag.ms "
                         f"({lag} ms) and this run did not compact it ({outcome})",
                         {"max_compaction_delay_ms": delay, "max_compaction_lag_ms": lag, "outcome": outcome}))
    return out


@dataclass(frozen=True)
class Notifier:
    """A ``notifiers:`` entry whose class was resolved and checked (``load_notifiers``)."""
    index: int
    spec: NotifierSpec
    cls: type

    @property
    def name(self) -> str:
        return f"notifiers[{self.index}] ({self.spec.class_path})"


def load_notifiers(specs: Iterable[NotifierSpec]) -> tuple[Notifier, ...]:
    """The configured notifiers, each class resolved and checked where the DAG loads the config
    (``evaluate``, before any table is cleaned), so a mistake is a ConfigError naming its entry
    then, not a surprise when the first alert goes out."""
    return tuple(Notifier(i, spec, notifier_class(spec, i)) for i, spec in enumerate(specs))


def notifier_class(spec: NotifierSpec, index: int) -> type:
    """The configured class, checked to be an Airflow notifier that takes the entry's kwargs; a
    ConfigError naming the entry otherwise (never its kwargs' values: they may hold secrets).
    What the module's source shows is checked before the module is imported (its code run)."""
    from airflow.sdk import BaseNotifier

    where = f"notifiers[{index}].class"
    module, _, name = spec.class_path.rpartition(".")
    problem = _unrun_problem(module, name)
    if problem:
        raise ConfigError(None, where, spec.class_path, problem)
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception as exc:  # noqa: BLE001 - importing runs the module: whatever it raises is this entry's
        raise ConfigError(None, where, spec.class_path,
                          f"cannot be imported ({type(exc).__name__}: {exc})") from None
    if not (isinstance(cls, type) and issubclass(cls, BaseNotifier)):
        raise ConfigError(None, where, spec.class_path, "is not an Airflow notifier (airflow.sdk.BaseNotifier)")
    try:
        inspect.signature(cls).bind(**spec.kwargs)
    except TypeError as exc:
        raise ConfigError(None, f"notifiers[{index}].kwargs", sorted(spec.kwargs),
                          f"do not fit {spec.class_path}: {exc}") from None
    return cls


def _unrun_problem(module: str, name: str) -> str | None:
    """What is wrong with ``module.name`` that can be told without running any code: the module is
    not installed, or its source binds no such name. None when nothing is, or the source cannot
    tell (already imported, compiled, a star import, a module ``__getattr__``)."""
    if module in sys.modules:
        return None
    spec = _find_unimported(module)
    if spec is None:
        return f"module {module} is not installed"
    try:
        source = spec.loader.get_source(module) if spec.loader is not None else None
        tree = ast.parse(source) if source is not None else None
    except (ImportError, OSError, SyntaxError, ValueError):
        return None  # importing it says what is wrong
    if tree is None:
        return None
    names, opaque = _bound_names(tree)
    if name in names or opaque:
        return None
    return f"module {module} defines no {name} (read from its source, not run)"


def _find_unimported(module: str):
    """The module's spec, found through the import system's finders without importing it or its
    packages (importlib.util.find_spec imports the parent packages: their code would run)."""
    path, spec = None, None
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        loaded = sys.modules.get(name)
        if loaded is not None:
            path = getattr(loaded, "__path__", None)
            continue
        spec = next(filter(None, (_ask(finder, name, path) for finder in sys.meta_path)), None)
        if spec is None:
            return None
        path = spec.submodule_search_locations
        if i < len(parts) and path is None:
            return None  # a module, not a package: nothing below it
    return spec


def _ask(finder, name: str, path):
    """One finder's spec for ``name`` (finding runs none of the module's code)."""
    try:
        return finder.find_spec(name, path) if hasattr(finder, "find_spec") else None
    except (ImportError, ValueError):
        return None


def _bound_names(tree: ast.Module) -> tuple[set[str], bool]:
    """The names a module binds outside its functions and classes, and whether it may bind others
    (a star import, a module __getattr__)."""
    names, opaque, todo = set(), False, list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
            opaque |= node.name == "__getattr__"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                opaque |= alias.name == "*"
                names.add(alias.asname or alias.name.split(".")[0])
        else:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            todo.extend(ast.iter_child_nodes(node))
    return names, opaque


def template_view(alert: Alert) -> dict[str, Any]:
    """The alert as notifier templates see it: every text HTML-escaped (markupsafe's Markup).
    Table names and error messages come from users and data, and templates are often HTML (an
    e-mail's html_content); an autoescaping template does not escape a Markup twice."""
    from markupsafe import escape

    def escaped(value):
        if isinstance(value, str):
            return escape(value)
        if isinstance(value, Mapping):
            return {k: escaped(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [escaped(v) for v in value]
        return value

    return escaped(alert.as_dict())


def send(notifiers: Iterable[Notifier], alerts: list[Alert], context: Mapping) -> list[str]:
    """Send each alert to each notifier configured for its kind, a fresh notifier per alert (a
    notifier renders its templates in place). One notifier failing does not stop the others;
    returns the errors, each naming the notifier and the alert."""
    errors = []
    for notifier in notifiers:
        for alert in (a for a in alerts if a.kind in notifier.spec.alerts):
            try:
                notifier.cls(**notifier.spec.kwargs)({**context, "alert": template_view(alert)})
            except Exception as exc:  # noqa: BLE001 - the other alerts and notifiers still go out
                errors.append(f"{notifier.name} could not send {alert.subject}: {type(exc).__name__}: {exc}")
    for error in errors:
        log.error("lakecleaner: %s", error)
    return errors
