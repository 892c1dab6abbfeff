"""The Lake Cleaner page of the Airflow 3 UI: every compacted table, and per table its runs, charts
and data-quality history with the Great Expectations Data Docs.

It only presents: the figures come from ``lakecleaner.dashboard`` (which reads the evaluation,
run history, validation results and cleaner state the package records). Pages are server-rendered
HTML with inline SVG charts (no JavaScript, no CDN).

Mounted by the API server at ``/lakecleaner`` (``fastapi_apps``):

    /lakecleaner/                          index: every compacted table
    /lakecleaner/tables/{namespace.table}  one table: charts, runs, validations
    /lakecleaner/api/tables[/{table}]      the same as JSON
    /lakecleaner/docs/{path}               the GX Data Docs site (files inside it only)
    /lakecleaner/ti/{dag}/{run}/{task}/{map_index}
                                           a mapped task instance -> its tables' pages (the task
                                           instance's rendered map index names them: one table
                                           redirects to its page, an application's several are listed)

Access: Airflow mounts plugin apps without its own authentication, so this app checks every
request itself with Airflow's dependency ``requires_access_dag`` (which authenticates with
``get_user``: the UI's ``_token`` JWT cookie or an ``Authorization: Bearer`` token, validated by the
configured auth manager): the caller must be allowed to read the runs of the lakecleaner DAG
(``LAKECLEANER_DAG_ID``, default ``lakecleaner``). No token: 401; an invalid token or no
permission: 403. FastAPI's own /docs, /redoc and /openapi.json are off (they would bypass it).
"""
from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.plugins_manager import AirflowPlugin

DAG_ID = os.environ.get("LAKECLEANER_DAG_ID", "lakecleaner")
URL_PREFIX = "/lakecleaner"

# Whoever may read the lakecleaner DAG's runs may read what they did to the tables.
can_read_lakecleaner = requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN, param_dag_id=DAG_ID)

app = FastAPI(title="Lake Cleaner", dependencies=[Depends(can_read_lakecleaner)],
              docs_url=None, redoc_url=None, openapi_url=None)


# ---------------------------------------------------------------- helpers
def _config():
    from lakecleaner.config import ConfigError, load_config

    try:
        return load_config()
    except (ConfigError, OSError) as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"lakecleaner is not configured: {exc}") from None


def _checked(table: str) -> str:
    from lakecleaner.dashboard import valid_table_name

    if not valid_table_name(table):
        raise HTTPException(status.HTTP_400_BAD_REQUEST,
                            "invalid table name: expected namespace.table, letters, digits and _ only")
    return table


def _table_view(table: str) -> dict:
    from lakecleaner.dashboard import load_table

    view = load_table(_config(), _checked(table))
    if view is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"unknown table {table}: not a compacted table of the catalog")
    return view


def _path(request: Request, name: str, **params: str) -> str:
    """An absolute path (no host) to one of this app's routes, under whatever prefix it is mounted."""
    return request.url_for(name, **params).path


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


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


# ---------------------------------------------------------------- SVG charts (server-side, no JS)
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


def svg_chart(title: str, labels: Sequence[str], series: Sequence[dict], fmt: Callable[[float], str] = _num,
              stacked: bool = True, thresholds: Iterable[tuple[float, str]] = (), caption: str = "",
              y_max: float | None = None, min_top: float = 4) -> str:
    """A small bar (stacked) or line chart as inline SVG. ``series``: {name, values, color,
    kind: "bar"|"line", colors: optional per-point colors}. Every data mark has class "mark" and a
    <title> tooltip. The y axis starts at 0 and reaches at least ``min_top`` (a scale for empty data)."""
    width, height, left, right, top, bottom = 620, 210, 64, 14, 30, 34
    pw, ph = width - left - right, height - top - bottom
    n = len(labels)
    figure = [f'<figure class="chart"><figcaption><b>{esc(title)}</b>'
              + (f'<span class="caption">{esc(caption)}</span>' if caption else "") + "</figcaption>"]
    if n == 0:
        figure.append('<p class="empty">No runs yet.</p></figure>')
        return "".join(figure)
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
    y = lambda v: top + ph - (min(v, top_value) / top_value) * ph  # noqa: E731
    band = pw / n
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" '
           f'aria-label="{esc(title)}">']
    for k in range(5):  # grid and y labels
        v = top_value * k / 4
        out.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
                   f'<text class="axis" x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{esc(fmt(v))}</text>')
    base = [0.0] * n
    bw = max(1.0, min(36.0, band * 0.7))
    each = bw if stacked or not bars else bw / len(bars)  # side by side when not stacked
    for k, s in enumerate(bars):
        for i, v in enumerate(s["values"]):
            if v is None:
                continue
            lo = base[i] if stacked else 0.0
            x = left + band * i + (band - bw) / 2 + (0 if stacked else k * each)
            color = (s.get("colors") or [None] * n)[i] or s["color"]
            y0, y1 = y(lo), y(lo + v)
            out.append(f'<rect class="mark" data-series="{esc(s["name"])}" x="{x:.1f}" y="{y1:.1f}" width="{each:.1f}" '
                       f'height="{max(0.0, y0 - y1):.1f}" fill="{color}"><title>{esc(labels[i])}: {esc(s["name"])} '
                       f'{esc(fmt(v))}</title></rect>')
            if stacked:
                base[i] += v
    for s in lines:
        pts = [(left + band * i + band / 2, y(v), v, i) for i, v in enumerate(s["values"]) if v is not None]
        if len(pts) > 1:
            out.append(f'<polyline fill="none" stroke="{s["color"]}" stroke-width="2" points="'
                       + " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in pts) + '"/>')
        for px, py, v, i in pts:
            out.append(f'<circle class="mark" data-series="{esc(s["name"])}" cx="{px:.1f}" cy="{py:.1f}" r="3.5" '
                       f'fill="{s["color"]}"><title>{esc(labels[i])}: {esc(s["name"])} {esc(fmt(v))}</title></circle>')
    for value, label in thresholds:
        out.append(f'<line class="threshold" x1="{left}" x2="{width - right}" y1="{y(value):.1f}" y2="{y(value):.1f}"/>'
                   f'<text class="threshold-label" x="{width - right - 4}" y="{y(value) - 4:.1f}" '
                   f'text-anchor="end">{esc(label)}</text>')
    shown = sorted({0, n - 1} | ({n // 2} if n > 4 else set()))
    for i in shown:  # x labels: first, middle, last run
        anchor = "start" if i == 0 and n > 1 else ("end" if i == n - 1 and n > 1 else "middle")
        x = left + band * i + (band / 2 if anchor == "middle" else (band - bw) / 2 if anchor == "start"
                                else band - (band - bw) / 2)
        out.append(f'<text class="axis" x="{x:.1f}" y="{height - 12}" text-anchor="{anchor}">{esc(labels[i])}</text>')
    lx = left
    for s in series:  # legend
        out.append(f'<rect x="{lx}" y="8" width="10" height="10" fill="{s["color"]}"/>'
                   f'<text class="legend" x="{lx + 14}" y="17">{esc(s["name"])}</text>')
        lx += 22 + 7 * len(s["name"])
    out.append("</svg>")
    figure.append("".join(out))
    figure.append("</figure>")
    return "".join(figure)


def table_charts(view: dict) -> str:
    runs = view["charted_runs"]
    labels = [(r["at"] or "")[5:19] for r in runs]  # MM-DD HH:MM:SS (UTC)
    failed = [COLORS["failed"] if r["status"] == "failed" else None for r in runs]
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
                 f"it took is clean. Now, from metadata: dirty ratio {_ratio(view.get('dirty_ratio'))}.")))
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
    return "".join(charts)


# ---------------------------------------------------------------- HTML
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px 20px;color:#1a202c;background:#fff}
h1{font-size:1.4rem;margin:0 0 4px} h2{font-size:1.1rem;margin:24px 0 8px}
a{color:#0069c2} .muted{color:#5f6b7a} .small{font-size:.85rem}
table.data{border-collapse:collapse;width:100%;font-size:.9rem}
table.data th,table.data td{border-bottom:1px solid #e2e8f0;padding:6px 8px;text-align:left;vertical-align:top;
overflow-wrap:break-word} table.data td:first-child{white-space:nowrap} .scroll{overflow-x:auto}
table.data td div.small,table.data td.small,table.data td pre{max-width:24em;overflow-wrap:anywhere}
table.data th{background:#f7fafc;font-weight:600;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;border-radius:10px;padding:1px 8px;font-size:.8rem;font-weight:600;white-space:nowrap}
.b-eligible{background:#dbeafe;color:#1e40af} .b-not-eligible{background:#edf2f7;color:#4a5568}
.b-invalid-config{background:#feebc8;color:#9c4221}
.b-unreadable,.b-uncleanable,.b-failed,.b-invalid-checkpoint{background:#fed7d7;color:#9b2c2c}
.b-committed,.b-passed{background:#c6f6d5;color:#22543d} .b-dry_run{background:#e9d8fd;color:#553c9a}
.warn{background:#fff5f5;border:1px solid #feb2b2;border-radius:6px;padding:8px 12px;margin:10px 0}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:12px}
figure.chart{margin:0;border:1px solid #e2e8f0;border-radius:6px;padding:8px}
figcaption b{display:block} .caption{display:block;color:#5f6b7a;font-size:.8rem;margin:2px 0 4px}
svg .grid{stroke:#edf2f7} svg .axis,svg .legend{font-size:11px;fill:#5f6b7a}
svg .threshold{stroke:#9b2c2c;stroke-dasharray:4 3} svg .threshold-label{font-size:10px;fill:#9b2c2c}
.empty{color:#5f6b7a;font-style:italic} pre{white-space:pre-wrap;margin:2px 0;font-size:.8rem}
.figures{display:flex;gap:24px;flex-wrap:wrap;margin:10px 0} .figures div{min-width:120px}
.figures b{display:block;font-size:1.1rem}
"""


def page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
                        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                        f"<style>{CSS}</style></head><body>{body}</body></html>")


def clip(text: str | None, n: int) -> str:
    text = text or ""
    return text if len(text) <= n else text[: n - 1] + "…"


def badge(text: str | None, kind: str | None = None) -> str:
    kind = (kind or text or "").replace(" ", "-")
    return f'<span class="badge b-{esc(kind)}">{esc(text)}</span>'


def _delay_cell(row: dict) -> str:
    bound = row.get("max_compaction_lag_ms")
    bound_text = "no bound" if bound is None else f"bound {_duration(bound)}"
    delay = row.get("max_compaction_delay_ms") or 0
    if delay:
        return f'{badge(_duration(delay) + " past", "failed")}<div class="small muted">{esc(bound_text)}</div>'
    return f'0 <span class="small muted">({esc(bound_text)})</span>'


def _run_cell(run: dict | None) -> str:
    if not run:
        return '<span class="muted">never</span>'
    text = badge(run["status"])
    if run["status"] == "failed":
        text += f'<div class="small">{esc(clip(run.get("error"), 160))}</div>'
    else:
        text += f' <span class="small">removed {_num(run["removed_total"])}</span>'
    return text + f'<div class="small muted">{esc(run["at"])}</div>'


def _quality_cell(q: dict | None, docs_href: str | None) -> str:
    if not q:
        return '<span class="muted">not validated</span>'
    text = badge("passed") if q["success"] else badge(f"{len(q['failed'])} rule(s) failed", "failed")
    if q["success"] and q["failed"]:
        text += f' <span class="small">{len(q["failed"])} warning(s)</span>'
    link = f' <a class="small" href="{esc(docs_href)}">Data Docs</a>' if docs_href else ""
    return text + link + f'<div class="small muted">{esc(q["at"])}</div>'


def _docs_link(request: Request, q: dict | None) -> str | None:
    if not q:
        return None
    return _path(request, "docs", path=q.get("docs_page") or "index.html")


def index_html(request: Request, rows: list[dict]) -> HTMLResponse:
    lines = []
    for r in rows:
        href = _path(request, "table_page", table=r["table"])
        state = (badge("uncleanable") + f'<div class="small">{r["consecutive_failures"]} failure(s) in a row</div>'
                 if r["uncleanable"] else (f'<span class="small">{r["consecutive_failures"]} failure(s)</span>'
                                           if r["consecutive_failures"] else '<span class="muted">ok</span>'))
        min_ratio = r.get("min_cleanable_dirty_ratio")
        lines.append(
            f'<tr data-table="{esc(r["table"])}"><td><a href="{esc(href)}">{esc(r["table"])}</a></td>'
            f'<td>{badge(r["status"])}<div class="small muted">{esc(clip(r["reason"], 140))}</div></td>'
            f'<td>{esc(r["strategy"] or "–")}</td>'
            f'<td class="num">{_ratio(r["dirty_ratio"])}'
            + (f'<div class="small muted">min {min_ratio}</div>' if min_ratio is not None else "") + "</td>"
            f'<td class="num">{_ratio(r["must_clean_ratio"])}</td>'
            f'<td>{_delay_cell(r)}</td><td>{_run_cell(r["last_run"])}</td>'
            f'<td>{_quality_cell(r["quality"], _docs_link(request, r["quality"]))}</td>'
            f"<td>{state}</td></tr>")
    table = _data_table("tables", ("Table", "Status", "Strategy", "Dirty ratio", "Must-clean ratio",
                                    "Max compaction delay", "Last run", "Data quality", "Cleaner"),
                        lines, "No compacted tables (cleanup.policy=compact) in the catalog.")
    body = (f"<h1>Lake Cleaner</h1><p class=\"muted\">Every compacted Iceberg table: what the scheduler sees now "
            f"(from metadata), the last run and the last data-quality validation. "
            f"<a href=\"{esc(_path(request, 'docs', path='index.html'))}\">Data Docs</a> · "
            f"<a href=\"{esc(_path(request, 'api_tables'))}\">JSON</a></p>{table}")
    return page("Lake Cleaner", body)


def _data_table(table_id: str, headers: tuple[str, ...], rows: list[str], empty: str) -> str:
    """One scrollable data table, or the sentence saying there is nothing to show."""
    if not rows:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return (f'<div class="scroll"><table class="data" id="{table_id}"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></div>")


def table_html(request: Request, v: dict) -> HTMLResponse:
    docs = lambda p: _path(request, "docs", path=p)  # noqa: E731
    warn = ""
    if v["uncleanable"]:
        warn = (f'<div class="warn"><b>Uncleanable</b> after {v["consecutive_failures"]} failed run(s) in a row; the '
                f'scheduler skips this table until an operator clears it (<code>lakecleaner clear-uncleanable '
                f'{esc(v["table"])}</code> or the DAG\'s <code>clear_uncleanable</code> param).'
                f'<pre>{esc(v.get("last_error") or "")}</pre></div>')
    elif v["status"] in ("invalid config", "invalid checkpoint", "unreadable"):
        warn = f'<div class="warn"><b>{esc(v["status"])}</b><pre>{esc(v["reason"])}</pre></div>'
    if v.get("physical_deletion"):
        warn += f'<div class="warn"><b>Physical deletion bound</b><pre>{esc(v["physical_deletion"])}</pre></div>'
    bound = v.get("max_compaction_lag_ms")
    figures = (
        f'<div class="figures"><div>Status<b>{badge(v["status"])}</b></div>'
        f'<div>Strategy<b>{esc(v["strategy"] or "–")}</b></div>'
        f'<div>Dirty ratio<b>{_ratio(v["dirty_ratio"])}</b>'
        + (f'<span class="small muted">min.cleanable {esc(v["min_cleanable_dirty_ratio"])}</span>'
           if v.get("min_cleanable_dirty_ratio") is not None else "") + "</div>"
        f'<div>Must-clean ratio<b>{_ratio(v["must_clean_ratio"])}</b></div>'
        f'<div>Max compaction delay<b>{_duration(v["max_compaction_delay_ms"] or 0)}</b><span class="small muted">'
        f'{"no bound" if bound is None else "bound " + _duration(bound)}</span></div>'
        f'<div>Runs recorded<b>{len(v["runs"])}</b></div></div>')
    run_rows = [
        f'<tr><td>{esc(r["at"])}</td><td>{badge(r["status"])}</td><td class="num">{_num(r["records_read"])}</td>'
        f'<td class="num">{_num(r["records_kept"])}</td><td class="num">{_num(r["removed_superseded"])}</td>'
        f'<td class="num">{_num(r["removed_expired_tombstones"])}</td><td class="num">{_num(r["quarantined"])}</td>'
        f'<td class="num">{_bytes(r["bytes_read"])}</td><td class="num">{_bytes(r["bytes_written"])}</td>'
        f'<td class="num">{_duration(r["duration_ms"])}</td><td class="small">{esc(r.get("error") or "")}</td></tr>'
        for r in reversed(v["runs"][-50:])]
    runs = _data_table("runs", ("Run (now)", "Outcome", "Read", "Kept", "Superseded", "Expired tombstones",
                                 "Quarantined", "Bytes read", "Bytes written", "Duration", "Error"),
                       run_rows, "No runs recorded.")
    val_rows = []
    for q in v["validations"]:
        failed = "".join(f'<div><b>{esc(f["rule"])}</b> ({esc(f["severity"])}): {esc(f["description"])}'
                         f'<pre>{esc(json.dumps(f["offending"], default=str))}</pre></div>' for f in q["failed"])
        link = (f'<a href="{esc(docs(q["docs_page"]))}">validation</a>' if q["docs_page"]
                else f'<a href="{esc(docs("index.html"))}">Data Docs</a>')
        outcome = badge("passed") if q["success"] else badge("failed")
        val_rows.append(f'<tr><td>{esc(q["at"])}</td><td>{esc(q["run_name"])}</td><td>{outcome}</td>'
                        f'<td class="num">{q["rules"]}</td><td>{failed or "<span class=muted>none</span>"}</td>'
                        f"<td>{link}</td></tr>")
    validations = _data_table("validations", ("Validated at", "Run name", "Outcome", "Rules",
                                              "Failed rules and offending rows", "Data Docs"),
                              val_rows, "No validations kept for this table.")
    body = (f'<p class="small"><a href="{esc(_path(request, "index"))}">← all tables</a></p>'
            f'<h1>{esc(v["table"])}</h1><p class="muted small">{esc(v["reason"])}</p>{warn}{figures}'
            f'<h2>Over time</h2><div class="charts">{table_charts(v)}</div>'
            f'<h2>Runs</h2>{runs}<h2>Data quality</h2>{validations}')
    return page(f"Lake Cleaner: {v['table']}", body)


# ---------------------------------------------------------------- routes
@app.exception_handler(StarletteHTTPException)
async def _html_errors(request: Request, exc: StarletteHTTPException):
    """JSON for the API; a short page for a browser (with a login link on 401)."""
    if "text/html" not in request.headers.get("accept", "") or request.url.path.startswith(
            request.scope.get("root_path", "") + "/api/"):
        return await http_exception_handler(request, exc)
    extra = ""
    if exc.status_code == status.HTTP_401_UNAUTHORIZED:
        try:
            from airflow.api_fastapi.app import get_auth_manager

            login = get_auth_manager().get_url_login(next_url=str(request.url))
            extra = f'<p><a href="{esc(login)}" target="_top">Log in to Airflow</a></p>'
        except Exception:  # noqa: BLE001 - the page still says what is wrong
            pass
    resp = page("Lake Cleaner", f"<h1>Lake Cleaner</h1><p>{exc.status_code}: {esc(exc.detail)}</p>{extra}")
    resp.status_code = exc.status_code
    return resp


@app.get("/", response_class=HTMLResponse, name="index")
def index(request: Request):
    from lakecleaner.dashboard import load_overview

    return index_html(request, load_overview(_config()))


@app.get("/tables/{table}", response_class=HTMLResponse, name="table_page")
def table_page(request: Request, table: str):
    return table_html(request, _table_view(table))


@app.get("/api/tables", name="api_tables")
def api_tables():
    from lakecleaner.dashboard import load_overview

    return {"tables": load_overview(_config())}


@app.get("/api/tables/{table}", name="api_table")
def api_table(table: str):
    return _table_view(table)


# GX's Data Docs load scripts from CDNs (no subresource integrity). Served under Airflow's origin, a
# compromised script could call Airflow's API as the logged-in user, so every page is sandboxed
# without allow-same-origin: it runs in an opaque origin of its own (no Airflow cookies, no reading
# Airflow's responses), its scripts still render it, its links still work.
DOCS_CSP = "sandbox allow-scripts allow-popups allow-popups-to-escape-sandbox; frame-ancestors 'self'"


@app.get("/docs/{path:path}", name="docs")
def docs(path: str):
    """A file of the Data Docs site, never anything outside it (``..``, encoded or not, absolute
    paths and symlinks leading out are all refused with 404)."""
    from lakecleaner.quality import docs_dir

    try:
        root = docs_dir(_config()).resolve()
    except ValueError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    if path == "" or path.endswith("/"):
        path += "index.html"
    if "\x00" in path or "\\" in path or Path(path).is_absolute():
        raise HTTPException(status.HTTP_404_NOT_FOUND, "not found")
    target = (root / path).resolve()
    if not target.is_relative_to(root) or not target.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, "not found")
    return FileResponse(target, headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
                                         "Content-Security-Policy": DOCS_CSP})


@app.get("/ti/{dag_id}/{run_id}/{task_id}/{map_index}", name="task_instance",
         dependencies=[Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE))])
def task_instance(request: Request, dag_id: str, run_id: str, task_id: str, map_index: str):
    """The task-instance tab: a lakecleaner application's rendered map index names its tables (one
    table: its page; several: a link to each)."""
    rendered = rendered_map_index(dag_id, run_id, task_id, map_index)
    from lakecleaner.dashboard import known_table, valid_table_name
    from lakecleaner.scheduler import tables_of_label

    names, more = tables_of_label(rendered or "")
    tables = [t for t in names if valid_table_name(t) and known_table(_config(), t)]
    if len(names) == 1 and tables and not more:
        return RedirectResponse(_path(request, "table_page", table=tables[0]), status_code=status.HTTP_303_SEE_OTHER)
    if tables:
        items = "".join(f'<li><a href="{esc(_path(request, "table_page", table=t))}">{esc(t)}</a></li>' for t in tables)
        rest = f"<p>and {more} more table(s): see <a href=\"{esc(_path(request, 'index'))}\">all tables</a>.</p>" if more else ""
        return page("Lake Cleaner", f"<h1>Lake Cleaner</h1><p>Task {esc(task_id)} (map index {esc(map_index)}) of "
                                    f"{esc(dag_id)} cleaned these tables, in this order:</p><ol>{items}</ol>{rest}")
    return page("Lake Cleaner", f'<h1>Lake Cleaner</h1><p>Task {esc(task_id)} (map index {esc(map_index)}) of '
                                f'{esc(dag_id)} is not a lakecleaner table job: its rendered map index '
                                f'({esc(rendered) if rendered else "none"}) names no compacted table. '
                                f'<a href="{esc(_path(request, "index"))}">All tables</a></p>')


def rendered_map_index(dag_id: str, run_id: str, task_id: str, map_index: str) -> str | None:
    """The task instance's rendered map index (its table, for lakecleaner's mapped jobs); None if the
    view was opened on an unmapped task instance. 404 if there is no such task instance."""
    try:
        index = int(map_index)
    except ValueError:  # the UI leaves {MAP_INDEX} as is on unmapped task instances
        return None
    if index < 0:
        return None
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
