"""The Lake Cleaner plugin inside a real ``airflow api-server`` (tests/ui_lake.py): Airflow's own
authentication guards every route, the Data Docs are served from their directory only, unknown or
malformed table names are refused, and what the pages and the JSON API show is what the package
recorded for a real tiny warehouse (Spark runs, GX validations, cleaner state)."""
from __future__ import annotations

import datetime as dt
import http.client
import urllib.parse

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
    from lakecleaner.config import load_config

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
    from lakecleaner.history import read_history
    from lakecleaner.quality import list_results
    from lakecleaner.scheduler import evaluate_all

    rows = {r["table"]: r for r in client.get("/lakecleaner/api/tables").json()["tables"]}
    assert sorted(rows) == sorted(TABLES)  # the quarantine and run-history tables are not compacted tables
    evaluations = {e.table: e for e in evaluate_all(cfg)}
    for table, row in rows.items():
        assert row["status"] == evaluations[table].status
        assert row["strategy"] == evaluations[table].strategy
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
    assert "compaction.strategy=&#x27;bogus&#x27;" in page.text  # the reason, HTML-escaped
    assert page.text.count('class="badge b-uncleanable"') >= 1


def test_table_page_charts_runs_and_links_validations_into_data_docs(client, cfg):
    from lakecleaner.history import read_history

    view = client.get(f"/lakecleaner/api/tables/{ORDERS}").json()
    history = read_history(cfg, ORDERS)
    assert [r["run_id"] for r in view["runs"]] == [r["run_id"] for r in reversed(history)]  # oldest first
    assert [r["removed_superseded"] for r in view["runs"]] == [r["removed_superseded"] for r in reversed(history)]
    assert all(0 < r["dirty_share_read"] <= 1 for r in view["runs"])
    assert [v["run_name"] for v in view["validations"]] == ["orders-run-3", "orders-run-2", "orders-run-1"]
    for v in view["validations"]:
        assert v["docs_page"].startswith(f"validations/shop/orders/{v['run_name']}/")
        doc = client.get(f"/lakecleaner/docs/{v['docs_page']}")
        assert doc.status_code == 200 and "Great Expectations" in doc.text
        csp = doc.headers["content-security-policy"]  # third-party scripts never run in Airflow's origin
        assert csp.startswith("sandbox allow-scripts") and "allow-same-origin" not in csp

    prices = client.get(f"/lakecleaner/api/tables/{PRICES}").json()
    assert [r["status"] for r in prices["runs"]] == ["committed", "dry_run", "committed"]
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


def test_data_docs_never_serve_a_file_outside_their_directory(api_server, token, cfg):
    from lakecleaner.quality import docs_dir

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
    import importlib.util
    from pathlib import Path

    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import _AuthManagerState
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.dag import DagModel

    spec = importlib.util.spec_from_file_location(
        "lakecleaner_plugin_under_test", Path(__file__).resolve().parents[2] / "plugins" / "lakecleaner_plugin.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)

    asked = []

    class AuthManager:
        allow = False

        async def get_user_from_token(self, token):
            if token != "good":
                raise jwt.InvalidTokenError("bad")
            return SimpleAuthManagerUser(username="someone", role="viewer")

        def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
            asked.append((method, access_entity, details.id, user.username))
            return self.allow

    manager = AuthManager()
    monkeypatch.setattr(_AuthManagerState, "instance", manager)
    monkeypatch.setattr(DagModel, "get_team_name", staticmethod(lambda dag_id, **_: None))  # no metadata DB here
    monkeypatch.setenv("LAKECLEANER_CONFIG", str(ui_lake))
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
