"""Hypothesis's example counts live in profiles, not in each test's ``@settings``: a count fixed
there overrides any profile, so ``make test-thorough`` could not ask for more.

Each property test states its count in the ``ci`` profile (what ``make test`` and CI run, chosen to
keep the suite's time) through :func:`examples`; the ``thorough`` profile multiplies it and lets
Hypothesis pick fresh examples each run instead of the fixed, derandomized ones CI repeats.
``LAKECLEANER_TEST_PROFILE`` selects the profile (default ``ci``)."""
import os

from hypothesis import HealthCheck, settings

PROFILE_ENV = "LAKECLEANER_TEST_PROFILE"
SCALE = {"ci": 1, "thorough": 8}

settings.register_profile("ci", deadline=None, database=None, derandomize=True,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("thorough", deadline=None, database=None, derandomize=False,
                          suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get(PROFILE_ENV, "ci")
if PROFILE not in SCALE:
    raise ValueError(f"{PROFILE_ENV}={PROFILE!r}: expected one of {', '.join(SCALE)}")
settings.load_profile(PROFILE)


def examples(ci_count: int) -> settings:
    """The test's settings: ``ci_count`` examples in the ci profile, scaled in the others."""
    return settings(max_examples=ci_count * SCALE[PROFILE])


def repeats(ci_count: int) -> int:
    """How often a randomized non-Hypothesis test repeats itself (chaos kills, random logs)."""
    return ci_count * SCALE[PROFILE]
