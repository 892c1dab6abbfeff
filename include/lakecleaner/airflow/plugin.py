"""The Lake Cleaner page of the Airflow 3 UI: every lakecleaner DAG of the deployment, each with
its compacted tables, and per table its runs, charts and data-quality history with the Great
Expectations Data Docs.

Registered by the ``airflow.plugins`` entry point of the lakecleaner distribution (pyproject.toml): an
API server with the package installed has it, nothing goes into a plugins folder.

Which DAGs: every DAG tagged ``lakecleaner`` (every DAG of ``lakecleaner_dag()``) that is not stale,
read from Airflow's metadata database; each on its own config (its catalog, its state root): the
config its evaluate task was built with, as the serialized DAG keeps it, else ``[lakecleaner] config``
(``lakecleaner.airflow.deployment``). A DAG whose config cannot be told or loaded shows as an error in
its group; the other groups are unaffected.

It only presents recorded facts: the figures come from ``lakecleaner.airflow.dashboard``, which reads the
last evaluation the DAG's evaluate task recorded, the run history, validation results and cleaner
state; a request never evaluates a table nor reads its metadata. Pages are server-rendered from
the Jinja2 templates in ``templates/lakecleaner/`` (autoescaped) with inline SVG charts (no
JavaScript, no CDN). The table lists and a table's runs are paginated (``?page=N&size=M``).

Mounted by the API server at ``/lakecleaner`` (``fastapi_apps``):

    /lakecleaner/                                    every lakecleaner DAG the caller may read, grouped:
                                                     each DAG's first page of tables (``?size=M``)
    /lakecleaner/dags/{dag_id}/                      one DAG's compacted tables (paginated)
    /lakecleaner/dags/{dag_id}/tables/{ns.table}     one table: charts, runs (paginated), validations
    /lakecleaner/dags/{dag_id}/docs/{path}           that DAG's GX Data Docs site under its state root (files
                                                     inside it only; its index.html: the DAG's page)
    /lakecleaner/api/dags                            the grouped index as JSON
    /lakecleaner/api/dags/{dag_id}/tables[/{table}]  the DAG's list and a table as JSON (same parameters)
    /lakecleaner/ti/{dag_id}/{run}/{task}/{map_index}
                                                     a mapped task instance of a lakecleaner DAG -> its
                                                     tables' pages (its rendered map index names them:
                                                     one table redirects to its page, several are listed)

Access: Airflow mounts plugin apps without its own authentication, so this app authenticates every
request itself with Airflow's ``get_user`` (the UI's ``_token`` JWT cookie or an ``Authorization:
Bearer`` token, validated by the configured auth manager; no credentials: 401, an invalid token:
403), and asks the auth manager, per DAG, whether the caller may read that DAG's runs: the index
lists only the DAGs they may (the others are not named), and every route under a dag_id depends on
Airflow's ``requires_access_dag`` for that dag_id (403 otherwise; the task-instance tab also needs
the task instances). After that check, a dag_id that names no lakecleaner DAG is a 404 and one whose
config cannot be loaded a 503. FastAPI's own /docs, /redoc and /openapi.json are off (they would
bypass the checks).
"""
from __future__ import annotations

import logging
import math
import mimetypes
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import quote

import jinja2
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep, get_user, requires_access_dag
from airflow.plugins_manager import AirflowPlugin

from lakecleaner.airflow import deployment
from lakecleaner.core.records import RunStatus

log = logging.getLogger("lakecleaner")
URL_PREFIX = "/lakecleaner"

# Every route needs a logged-in user; each DAG's pages, whoever may read that DAG's runs (the dag_id
# of the route's path: requires_access_dag reads it from there).
can_read_dag = Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN))
can_read_task_instances = Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE))

app = FastAPI(title="Lake Cleaner", dependencies=[Depends(get_user)], docs_url=None, redoc_url=None, openapi_url=None)


# ---------------------------------------------------------------- formatting (Jinja2 filters)
def _num(value: Any) -> str:
    return "–" if value is None else f"{value:,}"


def _ratio(value: Any) -> str:
    return "–" if value is None else f"{value:.1%}"


def _bytes(value: Any) -> str:
    if value is None:
        return "–"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)


def _duration(ms: Any) -> str:
    if ms is None:
        return "–"
    seconds = ms / 1000
    if seconds == 0:
        return "0"
    if seconds < 1:
        return f"{ms:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def clip(text: str | None, n: int) -> str:
    text = text or ""
    return text if len(text) <= n else text[: n - 1] + "…"


ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent / "templates"),
                         autoescape=True, trim_blocks=True, lstrip_blocks=True)
ENV.filters.update(num=_num, ratio=_ratio, bytes=_bytes, duration=_duration, clip=clip)
templates = Jinja2Templates(env=ENV)


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, f"lakecleaner/{name}", context, status_code=status_code)


# ---------------------------------------------------------------- the DAGs (lakecleaner.airflow.deployment)
def _lake(dag_id: str) -> deployment.LakeDag:
    """The lakecleaner DAG of a route's path (its access was checked first): 404 if there is none."""
    lake = deployment.find(dag_id)
    if lake is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no lakecleaner DAG {dag_id} (a DAG tagged "
                                                       "lakecleaner that is not stale)")
    return lake


def _config(lake: deployment.LakeDag):
    try:
        return lake.load()
    except deployment.Unconfigured as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc)) from None


def readable_lake_dags(user: BaseUser) -> list[deployment.LakeDag]:
    """The lakecleaner DAGs whose runs ``user`` may read, asked of the auth manager DAG by DAG as
    each DAG's routes ask it (requires_access_dag), with the DAG's team; only those are looked into."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.dag import DagModel

    dag_ids = deployment.tagged_dag_ids()
    if not dag_ids:
        return []
    teams = DagModel.get_dag_id_to_team_name_mapping(dag_ids)
    manager = get_auth_manager()
    return deployment.lake_dags([dag_id for dag_id in dag_ids if manager.is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.RUN, user=user,
        details=DagDetails(id=dag_id, team_name=teams.get(dag_id)))])


# ---------------------------------------------------------------- reading (lakecleaner.airflow.dashboard)
def _checked(table: str) -> str:
    from lakecleaner.airflow.dashboard import valid_table_name

    if not valid_table_name(table):
        raise HTTPException(status.HTTP_400_BAD_REQUEST,
                            "invalid table name: expected namespace.table, letters, digits and _ only")
    return table


def _recorded(read: Callable[[], Any]) -> Any:
    """A view read from the records: a page out of bounds is a 400, an unreadable record a 503
    saying which."""
    from lakecleaner.airflow.dashboard import PageError

    try:
        return read()
    except PageError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc)) from None


def _overview(dag_id: str, page: int, size: int | None) -> dict:
    from lakecleaner.airflow.dashboard import load_overview

    cfg = _config(_lake(dag_id))
    return {"dag_id": dag_id, **_recorded(lambda: load_overview(cfg, page, size))}


def _group(lake: deployment.LakeDag, size: int | None) -> dict:
    """One DAG's group of the index: its first page of tables, or why it cannot be shown. A bad
    ``size`` is the request's fault (400); anything else wrong stays in this DAG's group."""
    from lakecleaner.airflow.dashboard import PageError, Page, TABLES_PER_PAGE, load_overview

    Page(1, TABLES_PER_PAGE if size is None else size, 0)  # raises PageError before any DAG is read
    try:
        return {"dag_id": lake.dag_id, "error": None, **load_overview(lake.load(), 1, size)}
    except PageError:
        raise
    except deployment.Unconfigured as exc:
        return {"dag_id": lake.dag_id, "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - one DAG's unreadable records do not hide the others
        log.warning("lakecleaner: the tables of DAG %s cannot be read: %s", lake.dag_id, exc)
        return {"dag_id": lake.dag_id, "error": f"lakecleaner DAG {lake.dag_id}: its records cannot be read: {exc}"}


def _groups(user: BaseUser, size: int | None) -> list[dict]:
    return _recorded(lambda: [_group(lake, size) for lake in readable_lake_dags(user)])


def _table_view(dag_id: str, table: str, page: int, size: int | None) -> dict:
    from lakecleaner.airflow.dashboard import UnknownTable, load_table

    cfg = _config(_lake(dag_id))
    try:
        return {"dag_id": dag_id, **_recorded(lambda: load_table(cfg, _checked(table), page, size))}
    except UnknownTable as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None


# Bounds and default sizes are lakecleaner.airflow.dashboard's (Page): out of bounds is a 400 naming them.
PageNumber = Query(1, description="1-based page")
PageSize = Query(None, description="items per page (default: the listing's)")


def _path(request: Request, name: str, **params: str) -> str:
    """An absolute path (no host) to one of this app's routes, under whatever prefix it is mounted."""
    return request.url_for(name, **params).path


def page_links(request: Request, page: dict, path: str | None = None) -> dict:
    """first/previous/next/last links of a listing (None where there is none), keeping the size;
    on ``path`` (default: the request's own)."""
    def at(n: int | None) -> str | None:
        if n is None:
            return None
        url = request.url.include_query_params(page=n, size=page["size"])
        return f"{path or url.path}?{url.query}"

    return {"page": page, "first": at(1) if page["page"] > 1 else None, "previous": at(page["previous"]),
            "next": at(page["next"]), "last": at(page["pages"]) if page["page"] < page["pages"] else None}


# ---------------------------------------------------------------- SVG charts (geometry here, markup in macros.html)
COLORS = {"superseded": "#4c78a8", "tombstones": "#72b7b2", "quarantined": "#e45756", "read": "#4c78a8",
          "written": "#f58518", "duration": "#54a24b", "failed": "#e45756", "dirty": "#b279a2", "delay": "#f58518"}


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


@dataclass
class Chart:
    """A small bar (stacked) or line chart, as the shapes macros.html draws. Every data mark gets
    class "mark" and a <title> tooltip."""
    title: str
    caption: str
    labels: list[str]
    width: int = 620
    height: int = 210
    left: int = 64
    right: int = 606  # width - right margin
    grid: list[dict] = field(default_factory=list)
    rects: list[dict] = field(default_factory=list)
    lines: list[dict] = field(default_factory=list)
    points: list[dict] = field(default_factory=list)
    thresholds: list[dict] = field(default_factory=list)
    xlabels: list[dict] = field(default_factory=list)
    legend: list[dict] = field(default_factory=list)


def svg_chart(title: str, labels: Sequence[str], series: Sequence[dict], fmt: Callable[[float], str] = _num,
              stacked: bool = True, thresholds: Iterable[tuple[float, str]] = (), caption: str = "",
              y_max: float | None = None, min_top: float = 4) -> Chart:
    """``series``: {name, values, color, kind: "bar"|"line", colors: optional per-point colors}. The
    y axis starts at 0 and reaches at least ``min_top`` (a scale for empty data)."""
    chart = Chart(title, caption, list(labels))
    top, bottom = 30, 34
    pw, ph = chart.right - chart.left, chart.height - top - bottom
    n = len(labels)
    if n == 0:
        return chart
    bars = [s for s in series if s.get("kind", "bar") == "bar"]
    lines = [s for s in series if s.get("kind") == "line"]
    peak = 0.0
    for i in range(n):
        if bars:
            vals = [s["values"][i] or 0 for s in bars]
            peak = max(peak, sum(vals) if stacked else max(vals))
        for s in lines:
            peak = max(peak, s["values"][i] or 0)
    for value, _ in thresholds:
        peak = max(peak, value)
    top_value = y_max if y_max is not None else _nice_max(max(peak, min_top))
    y = lambda v: round(top + ph - (min(v, top_value) / top_value) * ph, 1)  # noqa: E731
    band = pw / n
    for k in range(5):
        v = top_value * k / 4
        chart.grid.append({"y": y(v), "label_y": round(y(v) + 4, 1), "label": fmt(v)})
    base = [0.0] * n
    bw = max(1.0, min(36.0, band * 0.7))
    each = bw if stacked or not bars else bw / len(bars)  # side by side when not stacked
    for k, s in enumerate(bars):
        for i, v in enumerate(s["values"]):
            if v is None:
                continue
            lo = base[i] if stacked else 0.0
            x = chart.left + band * i + (band - bw) / 2 + (0 if stacked else k * each)
            y0, y1 = y(lo), y(lo + v)
            chart.rects.append({"series": s["name"], "x": round(x, 1), "y": y1, "w": round(each, 1),
                                "h": round(max(0.0, y0 - y1), 1), "color": (s.get("colors") or [None] * n)[i] or s["color"],
                                "title": f"{labels[i]}: {s['name']} {fmt(v)}"})
            if stacked:
                base[i] += v
    for s in lines:
        pts = [(round(chart.left + band * i + band / 2, 1), y(v), v, i) for i, v in enumerate(s["values"]) if v is not None]
        if len(pts) > 1:
            chart.lines.append({"color": s["color"], "points": " ".join(f"{px},{py}" for px, py, _, _ in pts)})
        chart.points += [{"series": s["name"], "x": px, "y": py, "color": s["color"],
                          "title": f"{labels[i]}: {s['name']} {fmt(v)}"} for px, py, v, i in pts]
    chart.thresholds = [{"y": y(value), "label_y": round(y(value) - 4, 1), "label": label} for value, label in thresholds]
    for i in sorted({0, n - 1} | ({n // 2} if n > 4 else set())):  # x labels: first, middle, last run
        anchor = "start" if i == 0 and n > 1 else ("end" if i == n - 1 and n > 1 else "middle")
        x = chart.left + band * i + (band / 2 if anchor == "middle" else (band - bw) / 2 if anchor == "start"
                                     else band - (band - bw) / 2)
        chart.xlabels.append({"x": round(x, 1), "anchor": anchor, "label": labels[i]})
    lx = chart.left
    for s in series:  # legend
        chart.legend.append({"x": lx, "color": s["color"], "name": s["name"]})
        lx += 22 + 7 * len(s["name"])
    return chart


def table_charts(view: dict) -> list[Chart]:
    runs = view["charted_runs"]
    labels = [(r["at"] or "")[5:19] for r in runs]  # MM-DD HH:MM:SS (UTC)
    failed = [COLORS["failed"] if r["status"] == RunStatus.FAILED else None for r in runs]
    charts = [
        svg_chart("Records removed per run, by reason", labels, [
            {"name": "superseded", "values": [r["removed_superseded"] for r in runs], "color": COLORS["superseded"]},
            {"name": "expired tombstones", "values": [r["removed_expired_tombstones"] for r in runs],
             "color": COLORS["tombstones"]},
            {"name": "quarantined", "values": [r["quarantined"] for r in runs], "color": COLORS["quarantined"]},
        ], caption="Committed and failed runs, oldest left (dry runs are listed below, not charted)."),
        svg_chart("Bytes read and written per run", labels, [
            {"name": "read", "values": [r["bytes_read"] for r in runs], "color": COLORS["read"]},
            {"name": "written", "values": [r["bytes_written"] for r in runs], "color": COLORS["written"]},
        ], fmt=_bytes, stacked=False, min_top=1000, caption="Written = the run's delete files (merge-on-read)."),
        svg_chart("Run duration", labels, [
            {"name": "duration", "values": [r["duration_ms"] for r in runs], "color": COLORS["duration"],
             "colors": failed},
        ], fmt=_duration, min_top=1000, caption="Red: the run failed."),
    ]
    min_ratio = view.get("min_cleanable_dirty_ratio")
    thresholds = [(min_ratio, f"min.cleanable.dirty.ratio {min_ratio}")] if min_ratio is not None else []
    charts.append(svg_chart(
        "Dirty share before each run (proxy)", labels,
        [{"name": "dirty share of records read", "values": [r["dirty_share_read"] for r in runs],
          "color": COLORS["dirty"], "kind": "line"}],
        fmt=_ratio, thresholds=thresholds, y_max=1.0,
        caption=(f"Dirty records the run took / records it read: a proxy for the dirty ratio before the run "
                 f"(the run also reads cleaned records of the keys it touches). After a committed run the part "
                 f"it took is clean. At the last evaluation, from metadata: dirty ratio "
                 f"{_ratio(view.get('dirty_ratio'))}.")))
    vals = [v for v in reversed(view["validations"]) if v["delay_ms"] is not None]
    bound = view.get("max_compaction_lag_ms")
    charts.append(svg_chart(
        "Max compaction delay at each validation", [(v["at"] or "")[5:19] for v in vals],
        [{"name": "delay past max.compaction.lag.ms", "values": [v["delay_ms"] for v in vals],
          "color": COLORS["delay"], "kind": "line"}],
        fmt=_duration, thresholds=[(0, "bound met")], min_top=1000,
        caption=("How long dirty data had waited beyond max.compaction.lag.ms"
                 + (f" ({_duration(bound)})" if bound is not None else " (no bound set)")
                 + "; 0 = within the bound (KIP-354 max-compaction-delay).")))
    return charts


# ---------------------------------------------------------------- routes
@app.exception_handler(StarletteHTTPException)
async def _html_errors(request: Request, exc: StarletteHTTPException):
    """JSON for the API; a short page for a browser (with a login link on 401)."""
    if "text/html" not in request.headers.get("accept", "") or request.url.path.startswith(
            request.scope.get("root_path", "") + "/api/"):
        return await http_exception_handler(request, exc)
    login = None
    if exc.status_code == status.HTTP_401_UNAUTHORIZED:
        try:
            from airflow.api_fastapi.app import get_auth_manager

            login = get_auth_manager().get_url_login(next_url=str(request.url))
        except Exception:  # noqa: BLE001 - the page still says what is wrong
            pass
    return render(request, "message.html", exc.status_code, error={"code": exc.status_code, "detail": exc.detail},
                  login=login, ti=None)


def _docs_link(request: Request, dag_id: str, q: dict | None) -> str | None:
    if not q or not q.get("docs_page"):
        return None
    return _path(request, "docs", dag_id=dag_id, path=q["docs_page"])


def _listing(request: Request, group: dict, dag_page: bool) -> dict:
    """A DAG's group as the templates show it: links to its tables, its Data Docs, its JSON, its
    pager (on the grouped index, the pager leads into the DAG's own list)."""
    from lakecleaner.airflow.dashboard import valid_table_name

    dag_id = group["dag_id"]
    out = {**group, "href": _path(request, "dag_page", dag_id=dag_id),
           "json_href": _path(request, "api_dag_tables", dag_id=dag_id)}
    if group.get("error") is None:
        for row in group["tables"]:  # a listed name the pages refuse (not an identifier) gets no link
            row["href"] = (_path(request, "table_page", dag_id=dag_id, table=row["table"])
                           if valid_table_name(row["table"]) else None)
            row["docs_href"] = _docs_link(request, dag_id, row["quality"])
        out["links"] = page_links(request, group["page"], None if dag_page else out["href"])
    return out


@app.get("/", response_class=HTMLResponse, name="index")
def index(request: Request, user: GetUserDep, size: int | None = PageSize):
    groups = [_listing(request, g, dag_page=False) for g in _groups(user, size)]
    return render(request, "index.html", groups=groups, dag_page=False, json_href=_path(request, "api_dags"))


@app.get("/dags/{dag_id}/", response_class=HTMLResponse, name="dag_page", dependencies=[can_read_dag])
def dag_page(request: Request, dag_id: str, page: int = PageNumber, size: int | None = PageSize):
    group = _listing(request, {"error": None, **_overview(dag_id, page, size)}, dag_page=True)
    return render(request, "index.html", groups=[group], dag_page=True, index_href=_path(request, "index"),
                  json_href=group["json_href"])


@app.get("/dags/{dag_id}/tables/{table}", response_class=HTMLResponse, name="table_page",
         dependencies=[can_read_dag])
def table_page(request: Request, dag_id: str, table: str, page: int = PageNumber, size: int | None = PageSize):
    view = _table_view(dag_id, table, page, size)
    return render(request, "table.html", v=view, charts=table_charts(view),
                  links=page_links(request, view["runs_page"]), dag_href=_path(request, "dag_page", dag_id=dag_id),
                  docs_href=lambda p: _path(request, "docs", dag_id=dag_id, path=p))


@app.get("/api/dags", name="api_dags")
def api_dags(user: GetUserDep, size: int | None = PageSize):
    return {"dags": _groups(user, size)}


@app.get("/api/dags/{dag_id}/tables", name="api_dag_tables", dependencies=[can_read_dag])
def api_dag_tables(dag_id: str, page: int = PageNumber, size: int | None = PageSize):
    return _overview(dag_id, page, size)


@app.get("/api/dags/{dag_id}/tables/{table}", name="api_table", dependencies=[can_read_dag])
def api_table(dag_id: str, table: str, page: int = PageNumber, size: int | None = PageSize):
    return _table_view(dag_id, table, page, size)


# GX's Data Docs load scripts from CDNs (no subresource integrity). Served under Airflow's origin, a
# compromised script could call Airflow's API as the logged-in user, so every page is sandboxed
# without allow-same-origin: it runs in an opaque origin of its own (no Airflow cookies, no reading
# Airflow's responses), its scripts still render it, its links still work.
DOCS_CSP = "sandbox allow-scripts allow-popups allow-popups-to-escape-sandbox; frame-ancestors 'self'"


@app.get("/dags/{dag_id}/docs/{path:path}", name="docs", dependencies=[can_read_dag])
def docs(request: Request, dag_id: str, path: str):
    """A file of the DAG's Data Docs site (``<state root>/quality/docs``, read through pyiceberg's
    FileIO), never anything outside it (``..``, encoded or not, absolute paths and, under a local
    state root, symlinks leading out are all refused with 404). The site's index is the DAG's
    page: its tables' validations, each linking its page."""
    from lakecleaner.core.quality_results import DOCS_INDEX, docs_page_name, read_docs_file

    cfg = _config(_lake(dag_id))
    if path == "" or path.endswith("/"):
        path += DOCS_INDEX
    if docs_page_name(path) == DOCS_INDEX:
        return RedirectResponse(_path(request, "dag_page", dag_id=dag_id), status_code=status.HTTP_303_SEE_OTHER)
    try:
        data = read_docs_file(cfg, path)
    except (OSError, ValueError) as exc:
        log.warning("lakecleaner: DAG %s: cannot read its Data Docs file %r: %s", dag_id, path, exc)
        data = None
    if data is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "not found")
    media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    return Response(data, media_type=media_type, headers={
        "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Content-Security-Policy": DOCS_CSP})


@app.get("/ti/{dag_id}/{run_id}/{task_id}/{map_index}", name="task_instance",
         dependencies=[can_read_dag, can_read_task_instances])
def task_instance(request: Request, dag_id: str, run_id: str, task_id: str, map_index: str):
    """The task-instance tab: a lakecleaner application's tables, as its report (or, before it
    wrote one, the run's plan) records them (one table: its page; several: a link to each), in the
    DAG's own config."""
    from lakecleaner.airflow.dashboard import evaluated_tables, valid_table_name

    cfg = _config(_lake(dag_id))
    rendered = rendered_map_index(dag_id, run_id, task_id, map_index)
    names = application_tables(cfg, dag_id, run_id, task_id, int(map_index)) if rendered is not None else ()
    known = _recorded(lambda: {"tables": evaluated_tables(cfg)})["tables"]
    tables = [t for t in names if valid_table_name(t) and t in known]
    more = len(names) - len(tables)
    if len(names) == 1 and tables:
        return RedirectResponse(_path(request, "table_page", dag_id=dag_id, table=tables[0]),
                                status_code=status.HTTP_303_SEE_OTHER)
    return render(request, "message.html", error=None, login=None, ti={
        "task_id": task_id, "map_index": map_index, "dag_id": dag_id, "rendered": rendered,
        "more": more if tables else 0, "index_href": _path(request, "dag_page", dag_id=dag_id),
        "tables": [{"name": t, "href": _path(request, "table_page", dag_id=dag_id, table=t)} for t in tables]})


def application_tables(cfg, dag_id: str, run_id: str, task_id: str, index: int) -> tuple[str, ...]:
    """The tables application ``index`` of a run took: its report's (named from the run id, never
    from XCom), else the evaluate task's plan of it; none for any other task."""
    from lakecleaner.core.records import ApplicationPlan
    from lakecleaner.core.scheduler import read_report

    if task_id != "clean":
        return ()
    try:
        report = read_report(cfg, run_id, index)
    except Exception:  # noqa: BLE001 - an unreadable report: the plan still names the tables
        report = None
    if report is not None and report.tables:
        return report.tables
    try:
        planned = [ApplicationPlan.from_dict(p) for p in _evaluate_xcom(dag_id, run_id, "applications") or []]
    except (TypeError, ValueError):  # not what evaluate pushed (XCom can be edited): no tables
        return ()
    return next((p.tables for p in planned if p.index == index), ())


def _evaluate_xcom(dag_id: str, run_id: str, key: str):
    """What a run's evaluate task pushed under ``key`` (None: nothing)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session(scoped=False) as session:
        row = session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_id, task_ids="evaluate", key=key)).first()
        return XComModel.deserialize_value(row) if row is not None else None


MAP_INDEX_MAX = 2**31 - 1  # Airflow's task_instance.map_index: an INTEGER column


def rendered_map_index(dag_id: str, run_id: str, task_id: str, map_index: str) -> str | None:
    """The task instance's rendered map index (its table, for lakecleaner's mapped jobs); None if the
    view was opened on an unmapped task instance. 404 if there is no such task instance."""
    if not re.fullmatch(r"[0-9]+", map_index):  # -1, or {MAP_INDEX} as the UI leaves it: an unmapped task instance
        return None
    index = int(map_index) if len(map_index) <= len(str(MAP_INDEX_MAX)) else MAP_INDEX_MAX + 1
    if index > MAP_INDEX_MAX:  # the database would fail the query (a 500)
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task instance {dag_id}/{run_id}/{task_id}[{map_index[:20]}]")
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session(scoped=False) as session:
        found = session.execute(select(TaskInstance.rendered_map_index).where(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id,
            TaskInstance.map_index == index)).first()
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"no task instance {dag_id}/{run_id}/{task_id}[{index}]")
    return found[0]


# ---------------------------------------------------------------- the plugin
# A small broom, as a data: URL so the icon needs no route of its own.
ICON = "data:image/svg+xml," + quote(
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#4c78a8" stroke-width="2" '
    'stroke-linecap="round"><path d="M19 3l-7 7"/><path d="M9.5 9.5l5 5-2.5 6.5c-3-1-6-3-8.5-6.5z"/>'
    '<path d="M6 16l2-2M9 19l2-2"/></svg>')


class LakeCleanerPlugin(AirflowPlugin):
    name = "lakecleaner"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Lake Cleaner"}]
    external_views = [
        # hrefs are relative (no leading slash): the UI resolves them against its base URL
        {"name": "Lake Cleaner", "href": "lakecleaner/", "destination": "nav", "url_route": "lake-cleaner",
         "icon": ICON, "nav_top_level": True},
        # on every task instance; for a mapped lakecleaner job it leads to the table's page
        {"name": "Lake Cleaner", "href": "lakecleaner/ti/{DAG_ID}/{RUN_ID}/{TASK_ID}/{MAP_INDEX}",
         "destination": "task_instance", "url_route": "lake-cleaner-table", "icon": ICON},
    ]
