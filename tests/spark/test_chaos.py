"""A short `make chaos` series in the test suite: one cleaning run killed at each kind of point
(after quarantine, between the MERGE's commit and the checkpoint, after maintenance's rewrite, at
a random moment) while another process appends, on the PostgreSQL catalog."""
import pytest

from chaos import KINDS, Chaos
from hypothesis_profiles import repeats

pytestmark = pytest.mark.spark


def test_killed_runs_recover_exactly_and_lose_no_appended_record(spark, pg_config, tmp_path):
    kinds = [kind for kind in KINDS for _ in range(repeats(1))]  # once each in ci, more in thorough
    report = Chaos(spark, pg_config, tmp_path, seed=11).run(kinds)
    assert report.runs == len(kinds) and sum(report.kills[k] for k in KINDS) >= len(kinds) - repeats(1), report.lines()
    assert report.recovered == report.runs, report.lines()
    assert report.records_lost == 0 and report.unreadable_documents == 0, report.lines()
    assert report.records_appended > 0
