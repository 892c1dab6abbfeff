"""``--now-ms`` ahead of the clock is refused before any Spark starts (rules.now_in_future): a run as
of the future would expire tombstones early and date the checkpoint past every real run."""
from __future__ import annotations

import time

import pytest

from lakecleaner import cli
from lakecleaner.core.rules import CLOCK_SKEW_MS, now_in_future

HOUR = 3_600_000


def test_now_in_future_allows_the_clocks_skew_only():
    assert not now_in_future(1_000 + CLOCK_SKEW_MS, 1_000)
    assert now_in_future(1_001 + CLOCK_SKEW_MS, 1_000)
    assert not now_in_future(0, 1_000)  # a backfill's now


@pytest.fixture
def no_application(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError(f"an application was submitted: {args}")
    monkeypatch.setattr(cli, "run_job", refused)


@pytest.mark.parametrize("argv", [["compact", "a.t"], ["compact", "a.t", "--dry-run"], ["validate", "a.t"],
                                  ["forget", "a.t", "--keys", "-"]])
def test_a_future_now_is_refused_before_any_application(argv, no_application, capsys):
    future = int(time.time() * 1000) + HOUR
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--now-ms", str(future)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--now-ms: {future} (" in err and "ahead of this machine's clock" in err, err
    assert "delete.retention.ms" in err


def test_a_past_now_and_bad_values():
    past = int(time.time() * 1000) - 24 * HOUR
    assert cli.now_ms_arg(str(past)) == past
    with pytest.raises(Exception, match="not a time in epoch milliseconds: 'tomorrow'"):
        cli.now_ms_arg("tomorrow")
    with pytest.raises(Exception, match="beyond the calendar"):
        cli.now_ms_arg(str(10**20))
    # a checkpoint as of a negative now is one the cleaner refuses to read: the table would fail every run
    with pytest.raises(Exception, match="now -1 is before 1970"):
        cli.now_ms_arg("-1")
    assert cli.now_ms_arg("0") == 0


def test_evaluate_takes_a_future_now(tmp_path, capsys):
    """evaluate reads metadata and records nothing: what the next tick will plan is a fair question."""
    config = tmp_path / "lake.yaml"
    config.write_text(f"catalog:\n  type: hadoop\n  warehouse: {tmp_path / 'wh'}\n")
    future = int(time.time() * 1000) + HOUR
    assert cli.main(["--config", str(config), "evaluate", "--json", "--now-ms", str(future)]) == 0
