"""The YAML's notifiers with Airflow's real BaseNotifier: each class is resolved and checked when
the config is loaded (a mistake is a config error naming the entry, and a module that does not
define the class is never run), and alert texts reach a notifier's HTML template escaped."""
from __future__ import annotations

import json
import re
import sys

import jinja2
import pytest

from lakecleaner.airflow import notify
from lakecleaner.core.config import ConfigError, load_config

pytestmark = pytest.mark.airflow

RECORDING = "recording_notifier.RecordingNotifier"  # tests/airflow is on sys.path under pytest


def _config(tmp_path, entries: str):
    path = tmp_path / "lakecleaner.yaml"
    path.write_text(f"catalog:\n  name: lake\n  type: hadoop\n  warehouse: {tmp_path / 'wh'}\nnotifiers:\n{entries}")
    return load_config(path)


@pytest.fixture
def loud_module(tmp_path, monkeypatch):
    """An importable module whose code leaves a mark when it runs, and that defines no notifier."""
    (tmp_path / "loud_module.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\nclass Other:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "ran"
    sys.modules.pop("loud_module", None)


@pytest.mark.parametrize("entry, where, problem", [
    ("loud_module.Notifier", "notifiers[0].class", "module loud_module defines no Notifier"),
    ("no_such_package.notifications.Notifier", "notifiers[0].class", "module no_such_package.notifications is not installed"),
    ("json.JSONDecoder", "notifiers[0].class", "is not an Airflow notifier"),
])
def test_a_bad_notifier_class_is_a_config_error_naming_its_entry_when_loaded(tmp_path, loud_module, entry, where,
                                                                                problem):
    cfg = _config(tmp_path, f"  - class: {entry}\n")
    with pytest.raises(ConfigError, match="^lakecleaner config: " + re.escape(where)) as err:
        notify.load_notifiers(cfg.notifiers)
    assert problem in str(err.value)
    assert not loud_module.exists(), "the module's code ran before its class was checked"


def test_kwargs_the_class_does_not_take_are_named_without_their_values(tmp_path):
    cfg = _config(tmp_path, f"  - class: {RECORDING}\n    kwargs: {{path: x, webhook_token: s3cr3t}}\n")
    with pytest.raises(ConfigError, match=r"notifiers\[0\]\.kwargs") as err:
        notify.load_notifiers(cfg.notifiers)
    assert "webhook_token" in str(err.value) and "s3cr3t" not in str(err.value)


def test_a_good_entry_loads_and_its_html_template_gets_the_alert_escaped(tmp_path):
    from recording_notifier import RecordingNotifier

    out = tmp_path / "sent.jsonl"
    template = "<p>{{ alert.message }}</p><i>{{ alert.details.error }}</i>"
    cfg = _config(tmp_path, f"  - class: {RECORDING}\n    kwargs: {json.dumps({'path': str(out), 'message': template})}\n")
    (loaded,) = notify.load_notifiers(cfg.notifiers)
    assert loaded.cls is RecordingNotifier and loaded.name == f"notifiers[0] ({RECORDING})"
    hostile = '<img src=x onerror="fetch(1)"> & more'
    alert = notify.Alert("quality_failed", "ns.t", f"rule failed: {hostile}", {"error": "<script>x</script>"})
    assert notify.send((loaded,), [alert], {}) == []
    (sent,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert sent["message"] == ("<p>rule failed: &lt;img src=x onerror=&#34;fetch(1)&#34;&gt; &amp; more</p>"
                               "<i>&lt;script&gt;x&lt;/script&gt;</i>")
    # an autoescaping template does not escape the text twice
    view = notify.template_view(alert)
    assert jinja2.Environment(autoescape=True).from_string("{{ m }}").render(m=view["message"]) == view["message"]
    assert view["table"] == "ns.t" and view["details"]["error"].unescape() == "<script>x</script>"
