"""The Lake Cleaner plugin inside a real ``airflow api-server`` (tests/ui_lake.py): the plugin comes
from the package's entry point, finds the lakecleaner DAGs in Airflow's metadata database (DAGs of
the factory, each on its own config and lake) and shows each DAG's tables in its own group, behind
that DAG's access check; Airflow's own authentication guards every route, each DAG's Data Docs are
served from its directory only, unknown DAGs and tables and malformed names are refused, and what
the pages and the JSON API show is what the package recorded for real tiny warehouses (Spark runs,
GX validations, cleaner state)."""
from __future__ import annotations

import datetime as dt
import http.client
import os
import time
import urllib.parse
from pathlib import Path

import httpx
import jwt
import pytest

from ui_lake import (BROKEN, FLEET_DAG, FLEET_TABLES, JWT_SECRET, NOWHERE_DAG, ORDERS, PAYMENTS, PLAIN_DAG, PRICES,
                     RETIRED_DAG, SHOP_DAG, TABLES, TRUCKS)

pytest_plugins = ["ui_lake"]
pytestmark = [pytest.mark.airflow, pytest.mark.spark]
P = "/lakecleaner"


@pytest.fixture(scope="module")
def token(api_server) -> str:
    return api_server.token("admin")


@pytest.fixture(scope="module")
def client(api_server, token):
    with httpx.Client(base_url=api_server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def anonymous(api_server):
    with httpx.Client(base_url=api_server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def user_client(api_server):
    """A client logged in as one of the server's users (tests/ui_lake.py DAG_ACCESS)."""
    clients = []

    def make(user: str) -> httpx.Client:
        c = httpx.Client(base_url=api_server.url, headers={"Authorization": f"Bearer {api_server.token(user)}"},
                         timeout=60)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture(scope="module")
def cfg(ui_lake):
    from lakecleaner.core.config import load_config

    return load_config(ui_lake)


@pytest.fixture(scope="module")
def fleet_cfg(fleet_lake):
    from lakecleaner.core.config import load_config

    return load_config(fleet_lake)


def _run(api_server) -> str:
    return urllib.parse.quote(api_server.link_run_id, safe="")


def _dag_routes(api_server, dag_id: str) -> list[str]:
    """Every route of one DAG (the task-instance tab on the shop DAG's run)."""
    return [f"{P}/dags/{dag_id}/", f"{P}/dags/{dag_id}/tables/{ORDERS}", f"{P}/api/dags/{dag_id}/tables",
            f"{P}/api/dags/{dag_id}/tables/{ORDERS}", f"{P}/dags/{dag_id}/docs/", f"{P}/dags/{dag_id}/docs/index.html",
            f"{P}/ti/{dag_id}/{_run(api_server)}/clean/0"]


def _routes(api_server) -> list[str]:
    return [f"{P}/", f"{P}/api/dags", *_dag_routes(api_server, SHOP_DAG), *_dag_routes(api_server, FLEET_DAG),
            f"{P}/dags/{SHOP_DAG}/tables/shop.nope", f"{P}/dags/no_such_dag/", f"{P}/api/dags/{NOWHERE_DAG}/tables"]


def _claims(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


# ---------------------------------------------------------------- the plugin (the entry point, once)
DUPLICATE = "Plugin 'lakecleaner' already registered, skipping"


def test_the_plugin_is_registered_once_by_its_entry_point_with_its_app_and_views(api_server, client):
    """No plugins folder: the package's `airflow.plugins` entry point registers the page, once, and
    Airflow records no import error for it."""
    assert "AIRFLOW__CORE__PLUGINS_FOLDER" not in api_server.env
    assert [p["name"] for p in api_server.plugins].count("lakecleaner") == 1  # `airflow plugins -o json`
    plugins = client.get("/api/v2/plugins").json()["plugins"]
    ours = [p for p in plugins if p["name"] == "lakecleaner"]
    assert len(ours) == 1 and "EntryPoint(name='lakecleaner', value='lakecleaner.airflow.plugin:LakeCleanerPlugin'" in (
        ours[0]["source"])
    assert [a["url_prefix"] for a in ours[0]["fastapi_apps"]] == ["/lakecleaner"]
    views = {v["destination"]: v for v in ours[0]["external_views"]}
    assert views["nav"]["href"] == "lakecleaner/" and views["nav"]["url_route"] == "lake-cleaner"
    assert views["task_instance"]["href"] == "lakecleaner/ti/{DAG_ID}/{RUN_ID}/{TASK_ID}/{MAP_INDEX}"

    errors = [e for e in client.get("/api/v2/plugins/importErrors").json()["import_errors"]
              if "lakecleaner" in e["source"] or "lakecleaner" in e["error"]]
    if len(api_server.distributions) == 1:
        assert errors == []
    else:  # not the package: this environment has its metadata twice on sys.path (an editable
        # install's include/lakecleaner.egg-info beside the site-packages dist-info), and Airflow
        # loads each distribution's entry points; the second is skipped, as said.
        assert [e["error"] for e in errors] == [DUPLICATE], (api_server.distributions, errors)


# ---------------------------------------------------------------- authentication (Airflow's own)
def test_every_route_refuses_a_caller_without_credentials(api_server, anonymous):
    for route in _routes(api_server):
        resp = anonymous.get(route)
        assert resp.status_code == 401, (route, resp.status_code, resp.text[:300])
    # A browser gets a page saying so, with a way to Airflow's login.
    for route in (f"{P}/", f"{P}/dags/{SHOP_DAG}/"):
        page = anonymous.get(route, headers={"Accept": "text/html"})
        assert page.status_code == 401 and "/auth/login" in page.text


def test_every_route_refuses_bad_forged_and_expired_tokens(api_server, anonymous, token):
    claims = _claims(token)
    now = int(dt.datetime.now(dt.timezone.utc).timestamp())
    forged = jwt.encode({**claims, "exp": now + 3600}, "not-the-server-key-" * 4, algorithm="HS512")
    expired = jwt.encode({**claims, "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600}, JWT_SECRET,
                         algorithm="HS512", headers={"kid": "not-used"})
    resigned = jwt.encode({**claims, "exp": now + 3600}, JWT_SECRET, algorithm="HS512", headers={"kid": "not-used"})
    for route in [f"{P}/", f"{P}/api/dags", *_dag_routes(api_server, SHOP_DAG), *_dag_routes(api_server, FLEET_DAG)]:
        for bad, code in (("not-a-jwt", 403), (forged, 403), (expired, 401)):
            resp = anonymous.get(route, headers={"Authorization": f"Bearer {bad}"})
            assert resp.status_code == code, (route, resp.status_code, resp.text[:300])
    # the expired token differs from a good one by its expiry only: the same claims re-signed get in
    for route in (f"{P}/api/dags", f"{P}/api/dags/{SHOP_DAG}/tables"):
        assert anonymous.get(route, headers={"Authorization": f"Bearer {resigned}"}).status_code == 200
    # a wrong secret for a well-formed cookie is refused too
    with httpx.Client(base_url=api_server.url, cookies={"_token": forged}, timeout=60) as browser_like:
        assert browser_like.get(f"{P}/api/dags/{SHOP_DAG}/tables").status_code == 403
        assert browser_like.get(f"{P}/api/dags").status_code == 403


def test_a_logged_in_user_gets_in_by_bearer_token_or_the_ui_cookie(api_server, anonymous, token):
    assert anonymous.get(f"{P}/api/dags/{SHOP_DAG}/tables", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    with httpx.Client(base_url=api_server.url, cookies={"_token": token}, timeout=60) as browser_like:
        assert browser_like.get(f"{P}/").status_code == 200  # the cookie the UI's iframe sends
        assert browser_like.get(f"{P}/dags/{FLEET_DAG}/").status_code == 200
    viewer = api_server.token("viewer")  # SimpleAuthManager's viewer may read every DAG's runs, so the reports too
    for dag_id in (SHOP_DAG, FLEET_DAG):
        resp = anonymous.get(f"{P}/api/dags/{dag_id}/tables", headers={"Authorization": f"Bearer {viewer}"})
        assert resp.status_code == 200
    groups = anonymous.get(f"{P}/api/dags", headers={"Authorization": f"Bearer {viewer}"}).json()["dags"]
    assert [g["dag_id"] for g in groups] == [FLEET_DAG, NOWHERE_DAG, SHOP_DAG]


def test_fastapi_docs_of_the_plugin_app_are_not_exposed(client, anonymous):
    for route in (f"{P}/openapi.json", f"{P}/redoc", f"{P}/docs"):
        assert client.get(route).status_code == 404
        assert anonymous.get(route).status_code in (401, 404)


# ---------------------------------------------------------------- the DAGs, each behind its own access check
def test_the_index_groups_every_lakecleaner_dag_with_its_own_tables(client):
    """Every DAG tagged lakecleaner that is not stale, by id, each with its own lake's tables; the
    stale DAG and the DAG tagged otherwise are not listed."""
    groups = {g["dag_id"]: g for g in client.get(f"{P}/api/dags").json()["dags"]}
    assert list(groups) == [FLEET_DAG, NOWHERE_DAG, SHOP_DAG]
    assert sorted(r["table"] for r in groups[SHOP_DAG]["tables"]) == sorted(TABLES)
    assert sorted(r["table"] for r in groups[FLEET_DAG]["tables"]) == sorted(FLEET_TABLES)
    assert groups[SHOP_DAG]["error"] is None and groups[FLEET_DAG]["error"] is None
    # the same name in two lakes: two tables, each as its own lake recorded it
    shop_orders = next(r for r in groups[SHOP_DAG]["tables"] if r["table"] == ORDERS)
    fleet_orders = next(r for r in groups[FLEET_DAG]["tables"] if r["table"] == ORDERS)
    assert shop_orders["last_run"]["run_id"] != fleet_orders["last_run"]["run_id"]
    assert shop_orders["quality"]["run_name"] == "orders-run-3" and fleet_orders["quality"]["run_name"] == "fleet-run-1"

    page = client.get(f"{P}/")
    assert page.status_code == 200 and page.text.count('<section class="dag"') == 3
    for dag_id, tables in ((SHOP_DAG, TABLES), (FLEET_DAG, FLEET_TABLES)):
        section = page.text.split(f'data-dag="{dag_id}"', 1)[1].split("</section>", 1)[0]
        assert section.count("<tr data-table=") == len(tables)
        for table in tables:
            assert f'href="{P}/dags/{dag_id}/tables/{table}"' in section
        assert f'href="{P}/dags/{dag_id}/"' in section and f"evaluate task of {dag_id}" in section
    assert RETIRED_DAG not in page.text and PLAIN_DAG not in page.text


def test_each_table_is_reached_under_its_own_dag(client, cfg, fleet_cfg):
    from lakecleaner.core.history import read_history

    shop = client.get(f"{P}/api/dags/{SHOP_DAG}/tables/{ORDERS}").json()
    fleet = client.get(f"{P}/api/dags/{FLEET_DAG}/tables/{ORDERS}").json()
    assert shop["dag_id"] == SHOP_DAG and fleet["dag_id"] == FLEET_DAG
    assert [r["run_id"] for r in shop["runs"]] == [r["run_id"] for r in read_history(cfg, ORDERS)]
    assert [r["run_id"] for r in fleet["runs"]] == [r["run_id"] for r in read_history(fleet_cfg, ORDERS)]
    assert len(shop["runs"]) == 3 and len(fleet["runs"]) == 1
    assert [v["run_name"] for v in fleet["validations"]] == ["fleet-run-1"]
    assert client.get(f"{P}/api/dags/{FLEET_DAG}/tables/{TRUCKS}").json()["runs"] == []
    page = client.get(f"{P}/dags/{FLEET_DAG}/tables/{ORDERS}").text
    assert f'id="dag">lakecleaner DAG {FLEET_DAG}<' in page and f'href="{P}/dags/{FLEET_DAG}/"' in page
    assert f'href="{P}/dags/{FLEET_DAG}/docs/{fleet["validations"][0]["docs_page"]}"' in page
    # a table of one lake is unknown under the other
    for dag_id, table in ((FLEET_DAG, PRICES), (SHOP_DAG, TRUCKS)):
        for route in (f"{P}/dags/{dag_id}/tables/{table}", f"{P}/api/dags/{dag_id}/tables/{table}"):
            assert client.get(route).status_code == 404, route


def test_a_user_sees_only_the_dags_they_may_read(api_server, user_client):
    """shop_viewer may read the shop DAG only (tests/ui_auth.py): the index shows that group alone,
    names no other DAG, and every route of another DAG, existing or not, is a 403; nobody may read
    no DAG: an empty index and 403 everywhere else."""
    shop_viewer = user_client("shop_viewer")
    groups = shop_viewer.get(f"{P}/api/dags").json()["dags"]
    assert [g["dag_id"] for g in groups] == [SHOP_DAG]
    assert sorted(r["table"] for r in groups[0]["tables"]) == sorted(TABLES)
    # what Airflow's own DAG list shows the same user
    assert [d["dag_id"] for d in shop_viewer.get("/api/v2/dags", params={"tags": "lakecleaner"}).json()["dags"]] == [
        SHOP_DAG]
    page = shop_viewer.get(f"{P}/").text
    assert page.count('<section class="dag"') == 1 and f'data-dag="{SHOP_DAG}"' in page
    for other in (FLEET_DAG, NOWHERE_DAG, RETIRED_DAG, PLAIN_DAG):
        assert other not in page
    for route in _dag_routes(api_server, SHOP_DAG):
        assert shop_viewer.get(route).status_code in (200, 303), route
    for dag_id in (FLEET_DAG, NOWHERE_DAG, PLAIN_DAG, "no_such_dag"):
        for route in _dag_routes(api_server, dag_id):
            resp = shop_viewer.get(route)
            assert resp.status_code == 403, (route, resp.status_code, resp.text[:300])
            assert "tables" not in resp.json()
    html = shop_viewer.get(f"{P}/dags/{FLEET_DAG}/", headers={"Accept": "text/html"})
    assert html.status_code == 403 and "<tr data-table=" not in html.text

    nobody = user_client("nobody")
    assert nobody.get(f"{P}/api/dags").json() == {"dags": []}
    page = nobody.get(f"{P}/")
    assert page.status_code == 200 and '<section class="dag"' not in page.text
    assert not any(d in page.text for d in (SHOP_DAG, FLEET_DAG, NOWHERE_DAG))
    for dag_id in (SHOP_DAG, FLEET_DAG):
        for route in _dag_routes(api_server, dag_id):
            assert nobody.get(route).status_code == 403, route


def test_unknown_stale_and_other_dags_are_404_after_authentication(api_server, client, anonymous):
    for dag_id in ("no_such_dag", RETIRED_DAG, PLAIN_DAG):
        for route in _dag_routes(api_server, dag_id):
            assert anonymous.get(route).status_code == 401, route
            resp = client.get(route)
            assert resp.status_code == 404, (route, resp.status_code, resp.text[:300])
            assert f"no lakecleaner DAG {dag_id}" in resp.json()["detail"]
    html = client.get(f"{P}/dags/{PLAIN_DAG}/", headers={"Accept": "text/html"})
    assert html.status_code == 404 and f"no lakecleaner DAG {PLAIN_DAG}" in html.text


def test_a_dag_whose_config_cannot_be_loaded_is_an_error_in_its_own_group(api_server, client):
    missing = str(api_server.configs[NOWHERE_DAG])
    groups = {g["dag_id"]: g for g in client.get(f"{P}/api/dags").json()["dags"]}
    assert missing in groups[NOWHERE_DAG]["error"] and "tables" not in groups[NOWHERE_DAG]
    assert groups[SHOP_DAG]["tables"] and groups[FLEET_DAG]["tables"]  # the others are shown
    page = client.get(f"{P}/")
    assert page.status_code == 200
    section = page.text.split(f'data-dag="{NOWHERE_DAG}"', 1)[1].split("</section>", 1)[0]
    assert 'class="warn dag-error"' in section and missing in section and "<tr data-table=" not in section
    for route in _dag_routes(api_server, NOWHERE_DAG):
        resp = client.get(route)
        assert resp.status_code == 503 and missing in resp.json()["detail"], (route, resp.status_code, resp.text)
    html = client.get(f"{P}/dags/{NOWHERE_DAG}/", headers={"Accept": "text/html"})
    assert html.status_code == 503 and missing in html.text


# ---------------------------------------------------------------- what is shown
def test_index_shows_every_compacted_table_as_the_package_recorded_it(client, cfg, fleet_cfg):
    from lakecleaner.airflow.dashboard import iso
    from lakecleaner.core.history import read_history
    from lakecleaner.core.quality_results import list_results
    from lakecleaner.core.scheduler import last_evaluation

    for dag_id, lake, tables in ((SHOP_DAG, cfg, TABLES), (FLEET_DAG, fleet_cfg, FLEET_TABLES)):
        body = client.get(f"{P}/api/dags/{dag_id}/tables").json()
        rows = {r["table"]: r for r in body["tables"]}
        assert body["dag_id"] == dag_id
        assert sorted(rows) == sorted(tables)  # the quarantine and run-history tables are not compacted tables
        recorded = last_evaluation(lake)  # what the evaluate task recorded (tests/ui_lake.py), not re-evaluated
        assert body["evaluation"]["now_ms"] == recorded.now_ms and body["evaluation"]["at"] == iso(recorded.now_ms)
        assert body["page"] == {"page": 1, "size": 50, "total": len(tables), "pages": 1, "previous": None, "next": None}
        for table, row in rows.items():
            assert row["status"] == recorded.row(table)["status"]
            assert row["strategy"] == recorded.row(table)["strategy"]
            history, results = read_history(lake, table), list_results(lake, table)
            assert (row["last_run"] or {}).get("run_id") == (history[0]["run_id"] if history else None)
            assert (row["quality"] or {}).get("run_name") == (results[0]["run_name"] if results else None)

    rows = {r["table"]: r for r in client.get(f"{P}/api/dags/{SHOP_DAG}/tables").json()["tables"]}
    assert rows[BROKEN]["status"] == "invalid config" and "compaction.strategy" in rows[BROKEN]["reason"]
    assert rows[PAYMENTS]["uncleanable"] and rows[PAYMENTS]["consecutive_failures"] == 1
    assert rows[PAYMENTS]["last_run"]["status"] == "failed" and "payments" in rows[PAYMENTS]["last_run"]["error"]
    assert rows[PRICES]["max_compaction_lag_ms"] == 1 and rows[PRICES]["max_compaction_delay_ms"] > 0
    assert not rows[PRICES]["within_bound"] and rows[PRICES]["must_clean_ratio"] > 0
    assert rows[PRICES]["quality"]["failed"][0]["rule"] == "freshness (max.compaction.lag.ms)"
    assert rows[ORDERS]["max_compaction_lag_ms"] is None  # Long.MAX: no bound
    last = read_history(cfg, ORDERS)[0]
    assert rows[ORDERS]["last_run"]["removed_total"] == (
        last["removed_superseded"] + last["removed_expired_tombstones"] + last["quarantined"]) > 0


def test_index_page_links_every_table_and_escapes_what_it_shows(client):
    for route in (f"{P}/", f"{P}/dags/{SHOP_DAG}/"):
        page = client.get(route)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        for table in TABLES:
            assert f'href="{P}/dags/{SHOP_DAG}/tables/{table}"' in page.text
        assert "compaction.strategy=&#39;bogus&#39;" in page.text  # the reason, HTML-escaped
        assert 'class="small muted evaluated">Evaluated as of ' in page.text  # when the figures shown were computed
        assert page.text.count('class="badge b-uncleanable"') >= 1
        assert "/docs/index.html" not in page.text  # the DAG's page is its Data Docs' index
    dag_page = client.get(f"{P}/dags/{SHOP_DAG}/").text
    assert dag_page.count('<section class="dag"') == 1 and FLEET_DAG not in dag_page
    assert f'href="{P}/"' in dag_page  # back to every DAG


def test_table_page_charts_runs_and_links_validations_into_data_docs(client, cfg, fleet_cfg):
    from lakecleaner.core.history import read_history

    view = client.get(f"{P}/api/dags/{SHOP_DAG}/tables/{ORDERS}").json()
    history = read_history(cfg, ORDERS)
    assert [r["run_id"] for r in view["runs"]] == [r["run_id"] for r in history]  # the listed page: newest first
    assert [r["run_id"] for r in view["charted_runs"]] == [r["run_id"] for r in reversed(history)]  # oldest first
    assert [r["removed_superseded"] for r in view["charted_runs"]] == [r["removed_superseded"] for r in reversed(history)]
    assert all(0 < r["dirty_share_read"] <= 1 for r in view["runs"])
    assert view["runs_page"]["total"] == 3 and view["evaluated"]["at"]
    assert [v["run_name"] for v in view["validations"]] == ["orders-run-3", "orders-run-2", "orders-run-1"]
    for v in view["validations"]:
        assert v["docs_page"].startswith(f"validations/shop/orders/{v['run_name']}/")
        doc = client.get(f"{P}/dags/{SHOP_DAG}/docs/{v['docs_page']}")
        assert doc.status_code == 200 and "Great Expectations" in doc.text
        csp = doc.headers["content-security-policy"]  # third-party scripts never run in Airflow's origin
        assert csp.startswith("sandbox allow-scripts") and "allow-same-origin" not in csp
        assert client.get(f"{P}/dags/{FLEET_DAG}/docs/{v['docs_page']}").status_code == 404  # not in the fleet's docs

    # each DAG's Data Docs come from its own config's state root
    fleet_page = client.get(f"{P}/api/dags/{FLEET_DAG}/tables/{ORDERS}").json()["validations"][0]["docs_page"]
    assert fleet_page.startswith("validations/shop/orders/fleet-run-1/")
    doc = client.get(f"{P}/dags/{FLEET_DAG}/docs/{fleet_page}")
    assert doc.status_code == 200 and "Great Expectations" in doc.text
    assert doc.headers["content-security-policy"].startswith("sandbox allow-scripts")
    assert client.get(f"{P}/dags/{SHOP_DAG}/docs/{fleet_page}").status_code == 404
    for dag_id in (SHOP_DAG, FLEET_DAG):  # the site's index is the DAG's page, which lists every validation
        for index in ("", "index.html", "validations/../index.html"):
            resp = client.get(f"{P}/dags/{dag_id}/docs/{index}")
            assert resp.status_code == 303 and resp.headers["location"] == f"{P}/dags/{dag_id}/", index

    prices = client.get(f"{P}/api/dags/{SHOP_DAG}/tables/{PRICES}").json()
    assert [r["status"] for r in prices["runs"]] == ["committed", "dry_run", "committed"]  # newest first
    assert len(prices["charted_runs"]) == 2  # dry runs are listed, not charted
    assert prices["validations"][0]["delay_ms"] > 0

    page = client.get(f"{P}/dags/{SHOP_DAG}/tables/{ORDERS}").text
    assert page.count("<svg") == 5
    assert page.count('class="mark"') >= 3 * 3 + 3 * 2 + 3  # removed (3 reasons), bytes (2), duration, per run
    assert f'href="{P}/dags/{SHOP_DAG}/docs/{view["validations"][0]["docs_page"]}"' in page


def test_unknown_tables_are_404_and_malformed_names_400(client):
    for dag_id in (SHOP_DAG, FLEET_DAG):
        for table in ("shop.nope", "nowhere.orders", f"{ORDERS}__quarantine", "lakecleaner.run_history"):
            for prefix in (f"{P}/dags/{dag_id}/tables/", f"{P}/api/dags/{dag_id}/tables/"):
                resp = client.get(prefix + table)
                assert resp.status_code == 404, (table, resp.text)
            assert "unknown table" in client.get(f"{P}/api/dags/{dag_id}/tables/{table}").json()["detail"]
        for table in ("shop", "a.b.c", "shop.or-ders", "shop.orders;drop", "shop.or'ders", ".orders", "shop.",
                      "1shop.orders", "%2e%2e.orders"):
            resp = client.get(f"{P}/api/dags/{dag_id}/tables/{table}")
            assert resp.status_code == 400, (table, resp.status_code, resp.text)
        for table in ("shop.orders%0A", "shop.orders%00"):  # no route matches these at all
            resp = client.get(f"{P}/api/dags/{dag_id}/tables/{table}")
            assert resp.status_code in (400, 404) and "runs" not in resp.json(), (table, resp.status_code, resp.text)
    html_404 = client.get(f"{P}/dags/{SHOP_DAG}/tables/shop.nope", headers={"Accept": "text/html"})
    assert html_404.status_code == 404 and "unknown table shop.nope" in html_404.text


def test_the_table_lists_and_run_history_are_paginated_with_links(client):
    ordered = sorted(TABLES)
    api = f"{P}/api/dags/{SHOP_DAG}/tables"
    seen = []
    for number in range(1, len(ordered) + 1):  # size 1: one table per page, each once, in name order
        body = client.get(api, params={"page": number, "size": 1}).json()
        assert body["page"] == {"page": number, "size": 1, "total": 4, "pages": 4,
                                "previous": number - 1 or None, "next": number + 1 if number < 4 else None}
        seen += [r["table"] for r in body["tables"]]
    assert seen == ordered
    assert client.get(api, params={"page": 2, "size": 3}).json()["tables"][0]["table"] == ordered[3]
    past = client.get(api, params={"page": 5, "size": 1}).json()
    assert past["tables"] == [] and past["page"]["previous"] == 4
    for params in ({"page": 0}, {"page": -1}, {"size": 0}, {"size": 201}):
        resp = client.get(api, params=params)
        assert resp.status_code == 400 and "page must be >= 1 and size 1..200" in resp.json()["detail"], params
    assert client.get(api, params={"size": 200}).status_code == 200
    for params in ({"size": 0}, {"size": 201}):  # the grouped index: one size for every group
        for route in (f"{P}/api/dags", f"{P}/"):
            resp = client.get(route, params=params)
            assert resp.status_code == 400 and "page must be >= 1 and size 1..200" in resp.text, (route, params)

    dag = f"{P}/dags/{SHOP_DAG}/"
    page = client.get(dag, params={"page": 2, "size": 1}).text
    assert page.count("<tr data-table=") == 1 and f'data-table="{ordered[1]}"' in page
    assert f'rel="prev" href="{dag}?page=1&amp;size=1"' in page
    assert f'rel="next" href="{dag}?page=3&amp;size=1"' in page and "page 2 of 4 (4 tables)" in page
    assert f'rel="last" href="{dag}?page=4&amp;size=1"' in page
    last = client.get(dag, params={"page": 4, "size": 1}).text
    assert 'rel="next"' not in last and f'rel="prev" href="{dag}?page=3&amp;size=1"' in last
    assert 'rel="next"' not in client.get(dag).text  # one page: no pager at all

    # the grouped index shows each DAG's first page; its pager leads into that DAG's own list
    groups = {g["dag_id"]: g for g in client.get(f"{P}/api/dags", params={"size": 1}).json()["dags"]}
    assert [r["table"] for r in groups[SHOP_DAG]["tables"]] == ordered[:1] and groups[SHOP_DAG]["page"]["pages"] == 4
    assert [r["table"] for r in groups[FLEET_DAG]["tables"]] == sorted(FLEET_TABLES)[:1]
    index = client.get(f"{P}/", params={"size": 1}).text
    assert index.count("<tr data-table=") == 2
    assert f'rel="next" href="{dag}?page=2&amp;size=1"' in index and "page 1 of 4 (4 tables)" in index
    assert f'rel="next" href="{P}/dags/{FLEET_DAG}/?page=2&amp;size=1"' in index and "page 1 of 2 (2 tables)" in index
    assert 'rel="next"' not in client.get(f"{P}/").text

    runs = [client.get(f"{api}/{ORDERS}", params={"page": n, "size": 2}).json() for n in (1, 2)]
    assert [len(v["runs"]) for v in runs] == [2, 1] and runs[1]["runs_page"]["next"] is None
    assert len({r["run_id"] for v in runs for r in v["runs"]}) == 3
    assert all(len(v["charted_runs"]) == 3 for v in runs)  # the charts do not depend on the listed page
    html_runs = client.get(f"{P}/dags/{SHOP_DAG}/tables/{ORDERS}", params={"page": 1, "size": 2}).text
    assert html_runs.count("<tr data-run=") == 2 and "page 1 of 2 (3 runs)" in html_runs
    assert f'rel="next" href="{P}/dags/{SHOP_DAG}/tables/{ORDERS}?page=2&amp;size=2"' in html_runs
    assert client.get(f"{api}/{ORDERS}", params={"size": 500}).status_code == 400


def test_data_docs_never_serve_a_file_outside_their_directory(api_server, client, token, cfg, fleet_cfg):
    from lakecleaner.core.quality_results import docs_location
    from lakecleaner.core.state import local_path

    def root(lake) -> Path:
        return Path(local_path(docs_location(lake)))

    for lake in (cfg, fleet_cfg):
        (root(lake).parent / "secret.txt").write_text("outside the Data Docs")
        (root(lake) / "escape.txt").symlink_to(root(lake).parent / "secret.txt")
        (root(lake) / "escape_dir").symlink_to(root(lake).parent, target_is_directory=True)
    pages = {dag_id: client.get(f"{P}/api/dags/{dag_id}/tables/{ORDERS}").json()["validations"][0]["docs_page"]
             for dag_id in (SHOP_DAG, FLEET_DAG)}

    def raw_get(path: str) -> tuple[int, bytes]:
        """Sends the path exactly as written (HTTP clients would normalise dot segments)."""
        host, port = api_server.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.putrequest("GET", path, skip_accept_encoding=True)
            conn.putheader("Authorization", f"Bearer {token}")
            conn.endheaders()
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    # the other DAG's validation page, by dot segments from this one's site
    others_docs = {this: os.path.relpath(root(other) / pages[other_id], root(lake))
                   for this, lake, other, other_id in ((SHOP_DAG, cfg, fleet_cfg, FLEET_DAG),
                                                       (FLEET_DAG, fleet_cfg, cfg, SHOP_DAG))}
    for dag_id in (SHOP_DAG, FLEET_DAG):
        docs = f"{P}/dags/{dag_id}/docs"
        assert raw_get(f"{docs}/{pages[dag_id]}")[0] == 200
        assert raw_get(f"{docs}/validations/../{pages[dag_id]}")[0] == 200  # stays inside: fine
        for path in (f"{docs}/../secret.txt", f"{docs}/%2e%2e/secret.txt",
                     f"{docs}/%2E%2E%2Fsecret.txt", f"{docs}/..%2fsecret.txt",
                     f"{docs}/validations/../../secret.txt", f"{docs}/../../../../../../etc/passwd",
                     f"{docs}/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                     f"{docs}/%252e%252e/secret.txt", f"{docs}//etc/passwd",
                     f"{docs}/%2Fetc%2Fpasswd", f"{docs}/..%5csecret.txt",
                     f"{docs}/index.html%00", f"{docs}/escape.txt",
                     f"{docs}/escape_dir/secret.txt", f"{docs}/..",
                     # the other DAG's Data Docs, by dot segments from this one's, or by its route
                     f"{docs}/{others_docs[dag_id]}", f"{docs}/{others_docs[dag_id].replace('..', '%2e%2e')}",
                     f"{docs}/../../../dags/{SHOP_DAG if dag_id == FLEET_DAG else FLEET_DAG}/docs/{pages[dag_id]}"):
            code, body = raw_get(path)
            assert code == 404, (path, code, body[:200])
            assert b"outside the Data Docs" not in body and b"root:" not in body


def test_task_instance_view_leads_from_a_mapped_job_to_its_table(api_server, client, anonymous, user_client):
    run = _run(api_server)
    base = f"{P}/ti/{SHOP_DAG}/{run}/clean"
    for index, table in ((0, ORDERS), (1, PRICES)):  # their map indexes render as the table names
        resp = client.get(f"{base}/{index}")
        assert resp.status_code == 303 and resp.headers["location"] == f"{P}/dags/{SHOP_DAG}/tables/{table}"
    assert "names no compacted table" in client.get(f"{base}/2").text  # rendered "nowhere.gone"
    packed = client.get(f"{base}/3")  # an application whose report names two tables the lake knows, two it does not
    assert packed.status_code == 200 and "cleaned these tables, in this order" in packed.text
    assert packed.text.index(f'href="{P}/dags/{SHOP_DAG}/tables/{ORDERS}"') < packed.text.index(
        f'href="{P}/dags/{SHOP_DAG}/tables/{PRICES}"')
    assert "and 2 more table(s)" in packed.text and f'href="{P}/dags/{SHOP_DAG}/"' in packed.text
    assert "names no compacted table" in client.get(f"{base}/%7BMAP_INDEX%7D").text  # an unmapped task instance
    assert client.get(f"{base}/9").status_code == 404
    for huge in (2**31, 2**63, 10**20, "1" * 5000):  # past the map_index column: was a 500 (database, int())
        resp = client.get(f"{base}/{huge}")
        assert resp.status_code == 404 and "no task instance" in resp.text, (huge, resp.status_code)
    assert anonymous.get(f"{base}/0").status_code == 401
    # the dag_id of the path decides: its access, its config
    assert user_client("shop_viewer").get(f"{base}/0").status_code == 303
    assert user_client("nobody").get(f"{base}/0").status_code == 403
    assert client.get(f"{P}/ti/{FLEET_DAG}/{run}/clean/0").status_code == 404  # no such task instance of the fleet DAG
    for dag_id in (PLAIN_DAG, RETIRED_DAG, "no_such_dag"):
        resp = client.get(f"{P}/ti/{dag_id}/{run}/clean/0", headers={"Accept": "text/html"})
        assert resp.status_code == 404 and f"no lakecleaner DAG {dag_id}" in resp.text


# ---------------------------------------------------------------- authorization, in process
@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_authorization_is_asked_of_the_auth_manager_for_each_dag(ui_lake, fleet_lake, monkeypatch):
    """The plugin's app alone, with Airflow's auth manager replaced and the DAGs given: an
    authenticated user the auth manager does not allow to read a DAG's runs gets 403 on every route
    of that DAG and does not see it in the index; the auth manager is asked about that DAG."""
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

    plugin, manager, asked = _plugin_in_process(monkeypatch, {SHOP_DAG: ui_lake, FLEET_DAG: fleet_lake})
    routes = {dag_id: [f"/dags/{dag_id}/", f"/dags/{dag_id}/tables/{ORDERS}", f"/api/dags/{dag_id}/tables",
                       f"/api/dags/{dag_id}/tables/{ORDERS}", f"/dags/{dag_id}/docs/index.html"]
              for dag_id in (SHOP_DAG, FLEET_DAG)}
    good = {"Authorization": "Bearer good"}
    with TestClient(plugin.app) as client:
        for dag_id, dag_routes in routes.items():
            for route in dag_routes:
                assert client.get(route).status_code == 401, route
                assert client.get(route, headers={"Authorization": "Bearer bad"}).status_code == 403, route
                asked.clear()
                assert client.get(route, headers=good).status_code == 403, route
                assert asked == [("GET", DagAccessEntity.RUN, dag_id, "someone")], route
        for route in ("/", "/api/dags"):
            assert client.get(route).status_code == 401
            assert client.get(route, headers={"Authorization": "Bearer bad"}).status_code == 403
        asked.clear()
        assert client.get("/api/dags", headers=good).json() == {"dags": []}
        assert sorted(asked) == [("GET", DagAccessEntity.RUN, d, "someone") for d in sorted((SHOP_DAG, FLEET_DAG))]
        assert SHOP_DAG not in client.get("/", headers=good).text

        manager.allow = {FLEET_DAG}
        assert [g["dag_id"] for g in client.get("/api/dags", headers=good).json()["dags"]] == [FLEET_DAG]
        index = client.get("/", headers=good).text
        assert f'data-dag="{FLEET_DAG}"' in index and SHOP_DAG not in index
        for route in routes[FLEET_DAG]:
            assert client.get(route, headers=good).status_code == 200, route
        for route in routes[SHOP_DAG]:
            assert client.get(route, headers=good).status_code == 403, route
        manager.allow = {SHOP_DAG, FLEET_DAG}
        for route in routes[SHOP_DAG]:
            assert client.get(route, headers=good).status_code == 200, route


def _plugin_in_process(monkeypatch, configs: dict[str, Path], allow: bool | set = False):
    """The plugin's app (lakecleaner.airflow.plugin) in this process, with Airflow's auth manager
    replaced by one that knows the token "good" and allows the DAGs of ``allow`` (True: all; the
    ``manager.allow`` attribute can change it), and the deployment's lakecleaner DAGs given as
    ``configs`` (dag_id -> config path) instead of read from a metadata database."""
    from airflow.api_fastapi.app import _AuthManagerState
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.dag import DagModel

    from lakecleaner.airflow import deployment, plugin

    asked = []

    class AuthManager:
        async def get_user_from_token(self, token):
            if token != "good":
                raise jwt.InvalidTokenError("bad")
            return SimpleAuthManagerUser(username="someone", role="viewer")

        def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
            asked.append((method, access_entity, details.id, user.username))
            return self.allow is True or (isinstance(self.allow, set) and details.id in self.allow)

    manager = AuthManager()
    manager.allow = allow
    monkeypatch.setattr(_AuthManagerState, "instance", manager)
    monkeypatch.setattr(deployment, "tagged_dag_ids",
                        lambda dag_id=None: sorted(d for d in configs if dag_id in (None, d)))
    monkeypatch.setattr(deployment, "lake_dags",
                        lambda dag_ids: [deployment.LakeDag(d, str(configs[d])) for d in sorted(dag_ids)])
    # no metadata database here: no teams
    monkeypatch.setattr(DagModel, "get_team_name", staticmethod(lambda dag_id, **_: None))
    monkeypatch.setattr(DagModel, "get_dag_id_to_team_name_mapping", staticmethod(lambda dag_ids, **_: {}))
    return plugin, manager, asked


@pytest.fixture
def lake_copy(ui_lake, tmp_path):
    """A copy of the UI lake (warehouse, run history, cleaner state, validations) under its own
    config, for tests that break it."""
    import shutil

    base = ui_lake.parent
    shutil.copytree(base / "warehouse", tmp_path / "warehouse", symlinks=True)
    config = tmp_path / "lakecleaner.yaml"
    config.write_text(ui_lake.read_text().replace(str(base / "warehouse"), str(tmp_path / "warehouse")))
    return config


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_pages_present_the_recorded_evaluation_and_never_read_table_metadata(lake_copy, monkeypatch):
    """shop.orders' metadata is made unreadable after the evaluation was recorded: a request that
    evaluated would show it "unreadable" (or fail); the pages show what the evaluate task recorded."""
    from fastapi.testclient import TestClient

    from lakecleaner.core.config import load_config
    from lakecleaner.airflow.dashboard import iso
    from lakecleaner.core.metadata import MetadataReader
    from lakecleaner.core.scheduler import last_evaluation

    cfg = load_config(lake_copy)
    recorded = last_evaluation(cfg)
    metadata = Path(cfg.catalog.warehouse) / "shop" / "orders" / "metadata"
    for f in metadata.iterdir():
        f.unlink()
    with pytest.raises(FileNotFoundError):
        MetadataReader(cfg).read(ORDERS)  # unreadable now
    plugin, _, _ = _plugin_in_process(monkeypatch, {SHOP_DAG: lake_copy}, allow=True)
    good = {"Authorization": "Bearer good"}
    with TestClient(plugin.app) as client:
        rows = {r["table"]: r for r in client.get(f"/api/dags/{SHOP_DAG}/tables", headers=good).json()["tables"]}
        assert rows[ORDERS]["status"] == recorded.row(ORDERS)["status"] == "eligible"
        assert rows[ORDERS]["dirty_ratio"] == recorded.row(ORDERS)["dirty_ratio"] > 0
        view = client.get(f"/api/dags/{SHOP_DAG}/tables/{ORDERS}", headers=good).json()
        assert view["status"] == "eligible" and len(view["runs"]) == 3 and view["evaluated"]["at"] == iso(recorded.now_ms)
        page = client.get(f"/dags/{SHOP_DAG}/tables/{ORDERS}", headers=good)
        assert page.status_code == 200 and f"Evaluated as of {iso(recorded.now_ms)}" in page.text
        assert client.get("/", headers=good).status_code == 200
        assert client.get(f"/dags/{SHOP_DAG}/", headers=good).status_code == 200


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_names_and_reasons_with_html_characters_are_escaped(lake_copy, monkeypatch):
    """A catalog may hold a table whose name is not an identifier (Spark quotes it): the index lists
    it, escaped, without a link (its page would refuse the name), and nothing it carries becomes markup."""
    from fastapi.testclient import TestClient

    from lakecleaner.core.config import load_config
    from lakecleaner.core.evaluate import Evaluation
    from lakecleaner.core.scheduler import record_evaluation

    hostile = 'shop.<script>alert("x")</script>'
    reason = "table x: <img src=x onerror=alert(1)> & 'quoted'"
    record_evaluation(load_config(lake_copy), [Evaluation(hostile, "unreadable", reason),
                                               Evaluation(ORDERS, "eligible", reason, strategy="<b>offset</b>")],
                      int(time.time() * 1000))  # newer than the lake's own: an older one is not kept
    plugin, _, _ = _plugin_in_process(monkeypatch, {SHOP_DAG: lake_copy}, allow=True)
    good = {"Authorization": "Bearer good"}
    with TestClient(plugin.app) as client:
        index = client.get("/", headers=good).text
        dag = client.get(f"/dags/{SHOP_DAG}/", headers=good).text
        table = client.get(f"/dags/{SHOP_DAG}/tables/{ORDERS}", headers=good).text
    for text in (index, dag, table):
        assert "<script>" not in text and "<img" not in text and "<b>offset</b>" not in text
        assert "&lt;img src=x onerror=alert(1)&gt; &amp; &#39;quoted&#39;" in text
        assert "&lt;b&gt;offset&lt;/b&gt;" in text
    for text in (index, dag):
        assert 'data-table="shop.&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"' in text
        assert "<td>shop.&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</td>" in text  # listed, not linked


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_delete_files_and_bytes_are_shown_beside_the_dirty_ratio(lake_copy, monkeypatch):
    """The evaluation's delete figures (issue 37 item 2) in the tables' JSON, the index's column and
    the table page's figures."""
    from fastapi.testclient import TestClient

    from lakecleaner.core.config import load_config
    from lakecleaner.core.evaluate import Evaluation
    from lakecleaner.core.scheduler import record_evaluation

    record_evaluation(load_config(lake_copy), [Evaluation(ORDERS, "eligible", "dirty", strategy="offset", dirty_ratio=0.5,
                                                          delete_files=7, delete_bytes=3 * 2**20, delete_ratio=0.25)],
                      int(time.time() * 1000))  # newer than the lake's own: an older one is not kept
    plugin, _, _ = _plugin_in_process(monkeypatch, {SHOP_DAG: lake_copy}, allow=True)
    good = {"Authorization": "Bearer good"}
    with TestClient(plugin.app) as client:
        [row] = client.get(f"/api/dags/{SHOP_DAG}/tables", headers=good).json()["tables"]
        dag = client.get(f"/dags/{SHOP_DAG}/", headers=good).text
        table = client.get(f"/dags/{SHOP_DAG}/tables/{ORDERS}", headers=good).text
    assert (row["delete_files"], row["delete_bytes"], row["delete_ratio"]) == (7, 3 * 2**20, 0.25)
    assert "<th>Delete files</th>" in dag and "3.0 MB, 25.0% of records" in dag
    assert "Delete files<b>7</b>" in table and "3.0 MB; 25.0% of records deleted (rewrite past 20.0%)" in table


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_one_dags_unreadable_records_do_not_hide_the_others(ui_lake, tmp_path, monkeypatch):
    """A DAG whose config loads but whose records cannot be read (its evaluation record corrupt)
    shows an error in its own group; the other DAGs' groups are shown, and its own routes say 503."""
    from fastapi.testclient import TestClient

    from lakecleaner.core.config import load_config
    from lakecleaner.core.scheduler import record_evaluation

    broken = tmp_path / "broken.yaml"
    broken.write_text(f"catalog:\n  name: broken\n  type: hadoop\n  warehouse: {tmp_path / 'warehouse'}\n")
    record_evaluation(load_config(broken), [], int(time.time() * 1000))
    for f in Path(load_config(broken).state_root).rglob("*.json"):
        f.write_text("{not json")
    plugin, _, _ = _plugin_in_process(monkeypatch, {SHOP_DAG: ui_lake, "lakecleaner_broken": broken}, allow=True)
    good = {"Authorization": "Bearer good"}
    with TestClient(plugin.app) as client:
        groups = {g["dag_id"]: g for g in client.get("/api/dags", headers=good).json()["dags"]}
        assert groups["lakecleaner_broken"]["error"] and "tables" not in groups["lakecleaner_broken"]
        assert sorted(r["table"] for r in groups[SHOP_DAG]["tables"]) == sorted(TABLES)
        assert client.get("/", headers=good).status_code == 200
        assert client.get("/api/dags/lakecleaner_broken/tables", headers=good).status_code == 503
