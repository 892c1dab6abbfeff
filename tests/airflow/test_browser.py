"""The Lake Cleaner page as a person sees it: a real ``airflow api-server`` with the project's plugin
and lakecleaner DAGs on two tiny warehouses (tests/ui_lake.py), a real headless Chromium driven over
the Chrome DevTools protocol (the ``websockets`` package; no browser download, no WebDriver): log in
through Airflow's login page, open Lake Cleaner from the navigation, see each DAG's group, follow a
table of each, follow a task instance's Lake Cleaner tab. Screenshots go to test-artifacts/.

Needs Debian's ``chromium`` (``make browser-deps``). Skipped without it, except under CI (CI=true),
where a missing browser is an install step that was forgotten, so it fails.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytest_plugins = ["ui_lake"]
pytestmark = [pytest.mark.airflow, pytest.mark.spark]

CHROMIUM = Path(os.environ.get("LAKECLEANER_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


class Chromium:
    """Headless Chromium, one page, driven over the DevTools protocol."""

    def __init__(self, binary: Path, width: int = 1400, height: int = 900):
        from websockets.sync.client import connect

        self.profile = tempfile.mkdtemp(prefix="lakecleaner-chromium-")
        self.proc = subprocess.Popen(
            [str(binary), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run", f"--user-data-dir={self.profile}",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = Path(self.profile) / "DevToolsActivePort"  # Chromium writes its port here
        deadline = time.time() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.time() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            target = next(t for t in json.loads(resp.read()) if t["type"] == "page")
        self.ws = connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=30, legacy=True)
        self.ids = 0
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method: str, **params):
        self.ids += 1
        ident = self.ids
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:  # events in between are not needed: state is polled with eval()
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == ident:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def wait(self, expression: str, timeout: float = 60):
        """Polls a JS expression until it is truthy; returns its value."""
        deadline, last = time.time() + timeout, None
        while time.time() < deadline:
            try:
                last = self.eval(expression)
                if last:
                    return last
            except RuntimeError as exc:
                last = exc
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {expression!r} (last: {last!r})")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def type_into(self, selector: str, text: str) -> None:
        self.eval(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)  # as typed: React sees the input events

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001
            pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the browser's own process group only
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():  # `make test` installs it first (make browser-deps)
        pytest.fail(f"{CHROMIUM} is not installed: run `make browser-deps` (Debian's chromium package)")
    b = Chromium(CHROMIUM)
    yield b
    b.close()


# Expressions on the plugin page inside the Airflow UI's iframe (same origin, so readable).
FRAME = "document.querySelector('iframe[title=\"Lake Cleaner\"]')"
IN_FRAME = (f"(() => {{ const f = {FRAME}; const d = f && f.contentDocument; "
            "return d && d.readyState === 'complete' && (%s); })()")


def test_log_in_open_lake_cleaner_and_see_tables_and_charts(browser, api_server):
    from ui_lake import FLEET_DAG, FLEET_TABLES, NOWHERE_DAG, ORDERS, SHOP_DAG, TABLES

    url = api_server.url
    browser.goto(f"{url}/plugin/lake-cleaner")
    # Not logged in: the UI sends us to Airflow's own login page.
    browser.wait("location.pathname.startsWith('/auth/login') && !!document.querySelector('input[name=password]')")
    browser.type_into("input[name=username]", "admin")
    browser.type_into("input[name=password]", api_server.password("admin"))
    browser.wait("!document.querySelector('button[type=submit]').disabled")
    browser.eval("document.querySelector('button[type=submit]').click()")
    browser.wait("location.pathname === '/plugin/lake-cleaner'")

    # The navigation has the plugin's entry; the page shows every lakecleaner DAG with its compacted tables.
    assert browser.wait("[...document.querySelectorAll('a')].some(a => "
                        "a.getAttribute('href') === '/plugin/lake-cleaner' && a.textContent.includes('Lake Clea'))")
    groups = browser.wait(IN_FRAME % "Object.fromEntries([...d.querySelectorAll('section.dag')].map(s => "
                                     "[s.dataset.dag, [...s.querySelectorAll('table.tables tbody tr')].map("
                                     "r => r.dataset.table)]))")
    assert sorted(groups) == sorted([SHOP_DAG, FLEET_DAG, NOWHERE_DAG])
    assert sorted(groups[SHOP_DAG]) == sorted(TABLES) and sorted(groups[FLEET_DAG]) == sorted(FLEET_TABLES)
    assert groups[NOWHERE_DAG] == [] and browser.eval(
        IN_FRAME % f"!!d.querySelector('section[data-dag=\"{NOWHERE_DAG}\"] .dag-error')")
    shop = f"section[data-dag=\"{SHOP_DAG}\"]"
    statuses = browser.eval(IN_FRAME % f"Object.fromEntries([...d.querySelectorAll('{shop} table.tables tbody tr')]"
                                       ".map(r => [r.dataset.table, r.querySelector('.badge').textContent]))")
    assert statuses == {"shop.orders": "eligible", "shop.prices": "eligible", "shop.payments": "uncleanable",
                        "shop.broken": "invalid config"}
    time.sleep(0.5)  # let fonts settle before the picture
    browser.screenshot(ARTIFACTS / "lake_cleaner.png")

    # Follow a table of the shop DAG: its charts are SVG with one mark per charted run and series.
    browser.eval(IN_FRAME % f"d.querySelector('{shop} a[href$=\"/tables/{ORDERS}\"]').click() || true")
    browser.wait(IN_FRAME % f"d.location.pathname.endsWith('/dags/{SHOP_DAG}/tables/{ORDERS}')")
    charts = browser.wait(IN_FRAME % "d.querySelectorAll('figure.chart svg').length >= 4 && "
                                     "[...d.querySelectorAll('figure.chart')].map(f => ["
                                     "f.querySelector('b').textContent, f.querySelectorAll('svg .mark').length])")
    marks = dict(charts)
    assert marks["Records removed per run, by reason"] >= 3  # three committed runs, something removed in each
    assert marks["Bytes read and written per run"] == 6  # read and written, three runs
    assert marks["Run duration"] == 3
    assert marks["Max compaction delay at each validation"] == 3
    # The UI mirrors the iframe's location into its own URL (deep link).
    browser.wait(f"location.pathname === '/plugin/lake-cleaner/lakecleaner/dags/{SHOP_DAG}/tables/{ORDERS}'")
    validations = browser.eval(IN_FRAME % "d.querySelectorAll('#validations tbody tr').length")
    assert validations == 3
    time.sleep(0.5)
    browser.screenshot(ARTIFACTS / "lake_cleaner_table.png")

    # A Data Docs link opens GX's validation page, served by the plugin from inside the DAG's Data Docs site.
    href = browser.eval(IN_FRAME % "d.querySelector('#validations a').getAttribute('href')")
    assert href.startswith(f"/lakecleaner/dags/{SHOP_DAG}/docs/validations/shop/orders/")
    browser.eval(IN_FRAME % "d.querySelector('#validations a').click() || true")
    # The page is served sandboxed (a CSP without allow-same-origin): the frame now holds a document
    # of an opaque origin, which Airflow's page (and its scripts) can no longer reach into.
    browser.wait(f"(() => {{ const f = {FRAME}; return f && f.contentDocument === null; }})()")
    page = browser.eval(f"fetch({href!r}).then(r => r.text().then(t => [r.headers.get('content-security-policy'), "
                        "t.includes('Great Expectations')]))")
    assert page[0].startswith("sandbox allow-scripts") and page[1]

    # The table of the same name in the fleet DAG's lake is another page: its own DAG, its one run.
    browser.goto(f"{url}/plugin/lake-cleaner")
    fleet = f"section[data-dag=\"{FLEET_DAG}\"]"
    browser.wait(IN_FRAME % f"!!d.querySelector('{fleet} a[href$=\"/tables/{ORDERS}\"]')")
    browser.eval(IN_FRAME % f"d.querySelector('{fleet} a[href$=\"/tables/{ORDERS}\"]').click() || true")
    browser.wait(IN_FRAME % f"d.location.pathname.endsWith('/dags/{FLEET_DAG}/tables/{ORDERS}') && "
                            "!!d.querySelector('#runs')")
    assert browser.eval(IN_FRAME % "d.querySelector('#dag').textContent") == f"lakecleaner DAG {FLEET_DAG}"
    assert browser.eval(IN_FRAME % "d.querySelectorAll('#runs tbody tr').length") == 1


def test_task_instance_tab_leads_to_its_table(browser, api_server):
    """The task-instance external view of a mapped "clean" instance of the shop DAG whose map index
    renders as shop.prices shows shop.prices' page of that DAG (needs the login of the test above:
    same browser)."""
    from ui_lake import PRICES, SHOP_DAG

    run = urllib.parse.quote(api_server.link_run_id, safe="")
    browser.goto(f"{api_server.url}/dags/{SHOP_DAG}/runs/{run}/tasks/clean/mapped/1/plugin/lake-cleaner-table")
    frame = "document.querySelector('iframe[title=\"Lake Cleaner\"]')"
    browser.wait(f"(() => {{ const f = {frame}; const d = f && f.contentDocument; "
                 f"return d && d.location.pathname.endsWith('/dags/{SHOP_DAG}/tables/{PRICES}') && "
                 f"d.querySelector('h1') && d.querySelector('h1').textContent === '{PRICES}'; }})()")
    time.sleep(0.5)
    browser.screenshot(ARTIFACTS / "lake_cleaner_task_instance.png")
