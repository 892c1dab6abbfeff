"""The test run's own caches. The tests' class archive is made by one process at a time: ``make test``
starts making it in the background, and pytest_configure, which may look for it while that is under
way, waits and finds it made instead of making a second one (lakecleaner_dev.jvm_archive). pytest
keeps the test modules it rewrote (tests/conftest.py)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from lakecleaner_dev.run_cache import making


def test_a_second_process_waits_for_the_one_making_the_archive(tmp_path):
    maker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import pathlib, sys, time
        from lakecleaner_dev.run_cache import making
        with making(pathlib.Path({str(tmp_path)!r})):
            print("making", flush=True)
            time.sleep(0.3)
            (pathlib.Path({str(tmp_path)!r}) / "archive.jsa").write_text("made")
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert maker.stdout.readline().strip() == "making"
        with making(tmp_path):
            assert (tmp_path / "archive.jsa").read_text() == "made"
    finally:
        maker.wait(timeout=30)
    assert maker.returncode == 0


def test_pytest_keeps_the_rewritten_test_modules_whatever_pythondontwritebytecode_says():
    """tests/conftest.py: each worker would otherwise rewrite every test module's asserts again each run."""
    from pathlib import Path

    here = Path(__file__)
    assert list((here.parent / "__pycache__").glob(f"{here.stem}.{sys.implementation.cache_tag}-pytest-*.pyc"))


def test_an_entry_whose_maker_fails_keeps_nothing_and_the_next_run_makes_it(tmp_path):
    from lakecleaner_dev.run_cache import NotMade, entry

    def fails(part):
        part.write_text("half")
        raise NotMade("the warm-up application exited 1")

    try:
        entry(tmp_path, "archive.jsa", fails)
        raise AssertionError("a failed maker's entry was returned")
    except NotMade as exc:
        assert "exited 1" in str(exc)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".making.lock"]  # no half-made file, under no name
    made = entry(tmp_path, "archive.jsa", lambda part: part.write_text("whole"))
    assert made.read_text() == "whole"
    assert entry(tmp_path, "archive.jsa", fails) == made  # made once: the maker is not called again
