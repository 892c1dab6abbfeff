"""The moment a test runs the DAG for: its default schedule's next tick, the now a scheduled run
cleans as of (Airflow 3's cron timetable gives each run a zero-length interval ending there)."""
from __future__ import annotations

import datetime as dt

from lakecleaner.core.defaults import DEFAULT_SCHEDULE


def next_tick(after: dt.datetime) -> dt.datetime:
    """The first moment of the DAG's default schedule after ``after`` (kept timezone-aware)."""
    from croniter import croniter

    return croniter(DEFAULT_SCHEDULE, after).get_next(dt.datetime)
