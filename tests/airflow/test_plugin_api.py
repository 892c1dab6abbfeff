"""The Lake Cleaner plugin inside a real ``airflow api-server`` (tests/ui_lake.py): Airflow's own
authentication guards every route, the Data Docs are served from their directory only, unknown or
malformed table names are refused, and what the pages and the JSON API show is what the package
recorded for a real tiny warehouse (Spark runs, GX validations, cleaner state)."""
from __future__ import annotations

import datetime as dt
import http.client
import time
import urllib.parse
from pathlib import Path

import httpx
import jwt
import pytest

from ui_lake import BROKEN, JWT_SECRET, LINK_DAG_ID, ORDERS, PAYMENTS, PRICES, TABLES

pytest_plugins = ["ui_lake"]
pytestmark = [pytest.mark.airflow, pytest.mark.spark]


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
def cfg(ui_lake):
    from lakecleaner.core.config import load_config

    return load_config(ui_lake)


def _routes(api_server) -> list[str]:
    run = urllib.parse.quote(api_server.link_run_id, safe="")
    return ["/lakecleaner/", f"/lakecleaner/tables/{ORDERS}", "/lakecleaner/api/tables",
            f"/lakecleaner/api/tables/{ORDERS}",
            "/lakecleaner/docs/", "/lakecleaner/docs/index.html", f"/lakecleaner/ti/{LINK_DAG_ID}/{run}/compact/0",
            "/lakecleaner/tables/shop.nope"]


def _claims(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


# ---------------------------------------------------------------- authentication (Airflow's own)
def test_the_plugin_is_registered_with_its_app_and_views(client):
    plugins = client.get("/api/v2/plugins").json()["plugins"]
    ours = next(p for p in plugins if p["name"] == "lakecleaner")
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == ["/lakecleaner"]
    views = {v["destination"]: v for v in ours["external_views"]}
    assert views["nav"]["href"] == "lakecleaner/" and views["nav"]["url_route"] == "lake-cleaner"
    assert views["task_instance"]["href"] == "lakecleaner/ti/{DAG_ID}/{RUN_ID}/{TASK_ID}/{MAP_INDEX}"


def test_every_route_refuses_a_caller_without_credentials(api_server, anonymous):
    for route in _routes(api_server):
        resp = anonymous.get(route)
        assert resp.status_code == 401, (route, resp.status_code, resp.text[:300])
    # A browser gets a page saying so, with a way to Airflow's login.
    page = anonymous.get("/lakecleaner/", headers={"Accept": "text/html"})
    assert page.status_code == 401 and "/auth/login" in page.text


def test_every_route_refuses_bad_forged_and_expired_tokens(api_server, anonymous, token):
    claims = _claims(token)
    now = int(dt.datetime.now(dt.timezone.utc).timestamp())
    forged = jwt.encode({**claims, "exp": now + 3600}, "not-the-server-key-" * 4, algorithm="HS512")
    expired = jwt.encode({**claims, "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600}, JWT_SECRET,
                         algorithm="HS512", headers={"kid": "not-used"})
    resigned = jwt.encode({**claims, "exp": now + 3600}, JWT_SECRET, algorithm="HS512", headers={"kid": "not-used"})
    for route in _routes(api_server)[:7]:
        for bad, code in (("not-a-jwt", 403), (forged, 403), (expired, 401)):
            resp = anonymous.get(route, headers={"Authorization": f"Bearer {bad}"})
            assert resp.status_code == code, (route, resp.status_code, resp.text[:300])
    # the expired token differs from a good one by its expiry only: the same claims re-signed get in
    assert anonymous.get("/lakecleaner/api/tables", headers={"Authorization": f"Bearer {resigned}"}).status_code == 200
    # a wrong secret for a well-formed cookie is refused too
    with httpx.Client(base_url=api_server.url, cookies={"_token": forged}, timeout=60) as browser_like:
        assert browser_like.get("/lakecleaner/api/tables").status_code == 403


def test_a_logged_in_user_gets_in_by_bearer_token_or_the_ui_cookie(api_server, anonymous, token):
    assert anonymous.get("/lakecleaner/api/tables", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    with httpx.Client(base_url=api_server.url, cookies={"_token": token}, timeout=60) as browser_like:
        assert browser_like.get("/lakecleaner/").status_code == 200  # the cookie the UI's iframe sends
    viewer = api_server.token("viewer")  # SimpleAuthManager's viewer may read DAG runs, so the reports too
    assert anonymous.get("/lakecleaner/api/tables", headers={"Authorization": f"Bearer {viewer}"}).status_code == 200


def test_fastapi_docs_of_the_plugin_app_are_not_exposed(client, anonymous):
    for route in ("/lakecleaner/openapi.json", "/lakecleaner/redoc"):
        assert client.get(route).status_code == 404
        assert anonymous.get(route).status_code in (401, 404)


# ---------------------------------------------------------------- what is shown
def test_index_shows_every_compacted_table_as_the_package_recorded_it(client, cfg):
    from lakecleaner.airflow.dashboard import iso
    from lakecleaner.core.history import read_history
    from lakecleaner.core.quality_results import list_results
    from lakecleaner.core.scheduler import last_evaluation

    body = client.get("/lakecleaner/api/tables").json()
    rows = {r["table"]: r for r in body["tables"]}
    assert sorted(rows) == sorted(TABLES)  # the quarantine and run-history tables are not compacted tables
    recorded = last_evaluation(cfg)  # what the evaluate task recorded (tests/ui_lake.py), not re-evaluated
    assert body["evaluation"]["now_ms"] == recorded.now_ms and body["evaluation"]["at"] == iso(recorded.now_ms)
    assert body["page"] == {"page": 1, "size": 50, "total": 4, "pages": 1, "previous": None, "next": None}
    for table, row in rows.items():
        assert row["status"] == recorded.row(table)["status"]
        assert row["strategy"] == recorded.row(table)["strategy"]
        history, results = read_history(cfg, table), list_results(cfg, table)
        assert (row["last_run"] or {}).get("run_id") == (history[0]["run_id"] if history else None)
        assert (row["quality"] or {}).get("run_name") == (results[0]["run_name"] if results else None)

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
    page = client.get("/lakecleaner/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for table in TABLES:
        assert f'href="/lakecleaner/tables/{table}"' in page.text
    assert "compaction.strategy=&#39;bogus&#39;" in page.text  # the reason, HTML-escaped
    assert 'id="evaluated">Evaluated as of ' in page.text  # when the figures shown were computed
    assert page.text.count('class="badge b-uncleanable"') >= 1


def test_table_page_charts_runs_and_links_validations_into_data_docs(client, cfg):
    from lakecleaner.core.history import read_history

    view = client.get(f"/lakecleaner/api/tables/{ORDERS}").json()
    history = read_history(cfg, ORDERS)
    assert [r["run_id"] for r in view["runs"]] == [r["run_id"] for r in history]  # the listed page: newest first
    assert [r["run_id"] for r in view["charted_runs"]] == [r["run_id"] for r in reversed(history)]  # oldest first
    assert [r["removed_superseded"] for r in view["charted_runs"]] == [r["removed_superseded"] for r in reversed(history)]
    assert all(0 < r["dirty_share_read"] <= 1 for r in view["runs"])
    assert view["runs_page"]["total"] == 3 and view["evaluated"]["at"]
    assert [v["run_name"] for v in view["validations"]] == ["orders-run-3", "orders-run-2", "orders-run-1"]
    for v in view["validations"]:
        assert v["docs_page"].startswith(f"validations/shop/orders/{v['run_name']}/")
        doc = client.get(f"/lakecleaner/docs/{v['docs_page']}")
        assert doc.status_code == 200 and "Great Expectations" in doc.text
        csp = doc.headers["content-security-policy"]  # third-party scripts never run in Airflow's origin
        assert csp.startswith("sandbox allow-scripts") and "allow-same-origin" not in csp

    prices = client.get(f"/lakecleaner/api/tables/{PRICES}").json()
    assert [r["status"] for r in prices["runs"]] == ["committed", "dry_run", "committed"]  # newest first
    assert len(prices["charted_runs"]) == 2  # dry runs are listed, not charted
    assert prices["validations"][0]["delay_ms"] > 0

    page = client.get(f"/lakecleaner/tables/{ORDERS}").text
    assert page.count("<svg") == 5
    assert page.count('class="mark"') >= 3 * 3 + 3 * 2 + 3  # removed (3 reasons), bytes (2), duration, per run
    assert f'href="/lakecleaner/docs/{view["validations"][0]["docs_page"]}"' in page


def test_unknown_tables_are_404_and_malformed_names_400(client):
    for table in ("shop.nope", "nowhere.orders", f"{ORDERS}__quarantine", "lakecleaner.run_history"):
        for prefix in ("/lakecleaner/tables/", "/lakecleaner/api/tables/"):
            resp = client.get(prefix + table)
            assert resp.status_code == 404, (table, resp.text)
        assert "unknown table" in client.get(f"/lakecleaner/api/tables/{table}").json()["detail"]
    for table in ("shop", "a.b.c", "shop.or-ders", "shop.orders;drop", "shop.or'ders", ".orders", "shop.",
                  "1shop.orders", "%2e%2e.orders"):
        resp = client.get(f"/lakecleaner/api/tables/{table}")
        assert resp.status_code == 400, (table, resp.status_code, resp.text)
    for table in ("shop.orders%0A", "shop.orders%00"):  # no route matches these at all
        resp = client.get(f"/lakecleaner/api/tables/{table}")
        assert resp.status_code in (400, 404) and "runs" not in resp.json(), (table, resp.status_code, resp.text)
    html_404 = client.get("/lakecleaner/tables/shop.nope", headers={"Accept": "text/html"})
    assert html_404.status_code == 404 and "unknown table shop.nope" in html_404.text


def test_the_table_list_and_run_history_are_paginated_with_links(client):
    ordered = sorted(TABLES)
    seen = []
    for number in range(1, len(ordered) + 1):  # size 1: one table per page, each once, in name order
        body = client.get("/lakecleaner/api/tables", params={"page": number, "size": 1}).json()
        assert body["page"] == {"page": number, "size": 1, "total": 4, "pages": 4,
                                "previous": number - 1 or None, "next": number + 1 if number < 4 else None}
        seen += [r["table"] for r in body["tables"]]
    assert seen == ordered
    assert client.get("/lakecleaner/api/tables", params={"page": 2, "size": 3}).json()["tables"][0]["table"] == ordered[3]
    past = client.get("/lakecleaner/api/tables", params={"page": 5, "size": 1}).json()
    assert past["tables"] == [] and past["page"]["previous"] == 4
    for params in ({"page": 0}, {"page": -1}, {"size": 0}, {"size": 201}):
        resp = client.get("/lakecleaner/api/tables", params=params)
        assert resp.status_code == 400 and "page must be >= 1 and size 1..200" in resp.json()["detail"], params
    assert client.get("/lakecleaner/api/tables", params={"size": 200}).status_code == 200

    page = client.get("/lakecleaner/", params={"page": 2, "size": 1}).text
    assert page.count("<tr data-table=") == 1 and f'data-table="{ordered[1]}"' in page
    assert 'rel="prev" href="/lakecleaner/?page=1&amp;size=1"' in page
    assert 'rel="next" href="/lakecleaner/?page=3&amp;size=1"' in page and "page 2 of 4 (4 tables)" in page
    assert 'rel="last" href="/lakecleaner/?page=4&amp;size=1"' in page
    last = client.get("/lakecleaner/", params={"page": 4, "size": 1}).text
    assert 'rel="next"' not in last and 'rel="prev" href="/lakecleaner/?page=3&amp;size=1"' in last
    assert 'rel="next"' not in client.get("/lakecleaner/").text  # one page: no pager at all

    runs = [client.get(f"/lakecleaner/api/tables/{ORDERS}", params={"page": n, "size": 2}).json() for n in (1, 2)]
    assert [len(v["runs"]) for v in runs] == [2, 1] and runs[1]["runs_page"]["next"] is None
    assert len({r["run_id"] for v in runs for r in v["runs"]}) == 3
    assert all(len(v["charted_runs"]) == 3 for v in runs)  # the charts do not depend on the listed page
    html_runs = client.get(f"/lakecleaner/tables/{ORDERS}", params={"page": 1, "size": 2}).text
    assert html_runs.count("<tr data-run=") == 2 and "page 1 of 2 (3 runs)" in html_runs
    assert f'rel="next" href="/lakecleaner/tables/{ORDERS}?page=2&amp;size=2"' in html_runs
    assert client.get(f"/lakecleaner/api/tables/{ORDERS}", params={"size": 500}).status_code == 400


def test_data_docs_never_serve_a_file_outside_their_directory(api_server, token, cfg):
    from lakecleaner.core.quality_results import docs_dir

    root = docs_dir(cfg)
    (root.parent / "secret.txt").write_text("outside the Data Docs")
    (root / "escape.txt").symlink_to(root.parent / "secret.txt")
    (root / "escape_dir").symlink_to(root.parent, target_is_directory=True)

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

    assert raw_get("/lakecleaner/docs/index.html")[0] == 200
    assert raw_get("/lakecleaner/docs/validations/../index.html")[0] == 200  # stays inside: fine
    for path in ("/lakecleaner/docs/../secret.txt", "/lakecleaner/docs/%2e%2e/secret.txt",
                 "/lakecleaner/docs/%2E%2E%2Fsecret.txt", "/lakecleaner/docs/..%2fsecret.txt",
                 "/lakecleaner/docs/validations/../../secret.txt", "/lakecleaner/docs/../../../../../../etc/passwd",
                 "/lakecleaner/docs/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                 "/lakecleaner/docs/%252e%252e/secret.txt", "/lakecleaner/docs//etc/passwd",
                 "/lakecleaner/docs/%2Fetc%2Fpasswd", "/lakecleaner/docs/..%5csecret.txt",
                 "/lakecleaner/docs/index.html%00", "/lakecleaner/docs/escape.txt",
                 "/lakecleaner/docs/escape_dir/secret.txt", "/lakecleaner/docs/.."):
        code, body = raw_get(path)
        assert code == 404, (path, code, body[:200])
        assert b"outside the Data Docs" not in body and b"root:" not in body


def test_task_instance_view_leads_from_a_mapped_job_to_its_table(api_server, client, anonymous):
    run = urllib.parse.quote(api_server.link_run_id, safe="")
    base = f"/lakecleaner/ti/{LINK_DAG_ID}/{run}/compact"
    for index, table in ((0, ORDERS), (1, PRICES)):  # their map indexes render as the table names
        resp = client.get(f"{base}/{index}")
        assert resp.status_code == 303 and resp.headers["location"] == f"/lakecleaner/tables/{table}"
    assert "names no compacted table" in client.get(f"{base}/2").text  # rendered "nowhere.gone"
    packed = client.get(f"{base}/3")  # an application's instance: "shop.orders, shop.prices +2 more"
    assert packed.status_code == 200 and "cleaned these tables, in this order" in packed.text
    assert packed.text.index(f'href="/lakecleaner/tables/{ORDERS}"') < packed.text.index(f'href="/lakecleaner/tables/{PRICES}"')
    assert "and 2 more table(s)" in packed.text
    assert "names no compacted table" in client.get(f"{base}/%7BMAP_INDEX%7D").text  # an unmapped task instance
    assert client.get(f"{base}/9").status_code == 404
    assert anonymous.get(f"{base}/0").status_code == 401


# ---------------------------------------------------------------- authorization, in process
@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_authorization_is_asked_of_the_auth_manager_for_the_lakecleaner_dag(ui_lake, monkeypatch):
    """The plugin's app alone, with Airflow's auth manager replaced: an authenticated user the auth
    manager does not allow to read the lakecleaner DAG's runs gets 403 on every route."""
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

    plugin, manager, asked = _plugin_in_process(monkeypatch, ui_lake)
    routes = ["/", f"/tables/{ORDERS}", "/api/tables", f"/api/tables/{ORDERS}", "/docs/index.html"]
    with TestClient(plugin.app) as client:
        for route in routes:
            assert client.get(route).status_code == 401, route
            assert client.get(route, headers={"Authorization": "Bearer bad"}).status_code == 403, route
            assert client.get(route, headers={"Authorization": "Bearer good"}).status_code == 403, route
        assert set(asked) == {("GET", DagAccessEntity.RUN, "lakecleaner", "someone")}
        manager.allow = True
        for route in routes:
            assert client.get(route, headers={"Authorization": "Bearer good"}).status_code == 200, route


def _plugin_in_process(monkeypatch, config, allow: bool = False):
    """The plugin's app loaded in this process with Airflow's auth manager replaced by one that
    knows the token "good" and answers ``allow`` (the ``manager.allow`` attribute can change it)."""
    import importlib.util
    import sys

    from airflow.api_fastapi.app import _AuthManagerState
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.dag import DagModel

    spec = importlib.util.spec_from_file_location(
        "lakecleaner_plugin_under_test", Path(__file__).resolve().parents[2] / "plugins" / "lakecleaner_plugin.py")
    plugin = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, plugin)  # as Airflow's plugin loader registers it
    spec.loader.exec_module(plugin)
    asked = []

    class AuthManager:
        async def get_user_from_token(self, token):
            if token != "good":
                raise jwt.InvalidTokenError("bad")
            return SimpleAuthManagerUser(username="someone", role="viewer")

        def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
            asked.append((method, access_entity, details.id, user.username))
            return self.allow

    manager = AuthManager()
    manager.allow = allow
    monkeypatch.setattr(_AuthManagerState, "instance", manager)
    monkeypatch.setattr(DagModel, "get_team_name", staticmethod(lambda dag_id, **_: None))  # no metadata DB here
    monkeypatch.setenv("LAKECLEANER_CONFIG", str(config))
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
    plugin, _, _ = _plugin_in_process(monkeypatch, lake_copy, allow=True)
    good = {"Authorization": "Bearer good"}
    with TestClient(plugin.app) as client:
        rows = {r["table"]: r for r in client.get("/api/tables", headers=good).json()["tables"]}
        assert rows[ORDERS]["status"] == recorded.row(ORDERS)["status"] == "eligible"
        assert rows[ORDERS]["dirty_ratio"] == recorded.row(ORDERS)["dirty_ratio"] > 0
        view = client.get(f"/api/tables/{ORDERS}", headers=good).json()
        assert view["status"] == "eligible" and len(view["runs"]) == 3 and view["evaluated"]["at"] == iso(recorded.now_ms)
        page = client.get(f"/tables/{ORDERS}", headers=good)
        assert page.status_code == 200 and f"Evaluated as of {iso(recorded.now_ms)}" in page.text
        assert client.get("/", headers=good).status_code == 200


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
    plugin, _, _ = _plugin_in_process(monkeypatch, lake_copy, allow=True)
    good = {"Authorization": "Bearer good"}
    with TestClient(plugin.app) as client:
        index = client.get("/", headers=good).text
        table = client.get(f"/tables/{ORDERS}", headers=good).text
    for text in (index, table):
        assert "<script>" not in text and "<img" not in text and "<b>offset</b>" not in text
        assert "&lt;img src=x onerror=alert(1)&gt; &amp; &#39;quoted&#39;" in text
        assert "&lt;b&gt;offset&lt;/b&gt;" in text
    assert 'data-table="shop.&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"' in index
    assert "<td>shop.&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</td>" in index  # listed, not linked
